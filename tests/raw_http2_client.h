// A deliberately small HTTP/2 client on a plain socket, for tests that must act as no
// gRPC client would: announce a zero receive window and never read a reply, send a
// length prefix the data never matches, stall halfway through a request. It speaks just
// enough HTTP/2 for gRPC's server: the preface, SETTINGS (acknowledged), PING (answered),
// WINDOW_UPDATE (obeyed when sending), request HEADERS as literal HPACK fields, DATA. It
// does not decode response headers (HPACK with Huffman coding): a test reads the outcome
// from the server's own counters, and sees here only how a stream ended (trailers or
// RST_STREAM) and how many DATA bytes came back. Not thread-safe.
#ifndef GEMMD_TESTS_RAW_HTTP2_CLIENT_H_
#define GEMMD_TESTS_RAW_HTTP2_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gemmd::testing {

class RawHttp2Client {
 public:
  // Connects to 127.0.0.1:port and announces `initial_window_bytes` as its stream receive
  // window (0: the server can send no DATA at all until the client says so, which this
  // client never does).
  static absl::StatusOr<std::unique_ptr<RawHttp2Client>> Connect(int port,
                                                                 uint32_t initial_window_bytes);
  ~RawHttp2Client();

  // Opens a stream: HEADERS for a gRPC call to `path` (with grpc-timeout when `timeout` is
  // finite). Returns the stream id.
  uint32_t StartCall(absl::string_view path, absl::Duration timeout = absl::InfiniteDuration());

  // Sends `bytes` as DATA on `stream` as fast as the server's flow-control windows allow,
  // reading the server's frames meanwhile. Returns the bytes sent: all of them, or fewer
  // when the stream or the connection ended first (or `deadline` passed).
  int64_t SendData(uint32_t stream, absl::string_view bytes, bool end_stream,
                   absl::Time deadline = absl::InfiniteFuture());

  struct StreamState {
    bool ended = false;       // trailers (END_STREAM) or RST_STREAM arrived
    int rst_code = -1;        // RST_STREAM's error code, when that is how it ended
    bool got_headers = false;
    int64_t data_bytes = 0;   // DATA received (this client grants no window, so at most
                              // what the initial window allowed)
  };
  // Reads frames until `stream` ends or `deadline` passes; returns what is known of it.
  StreamState AwaitEnd(uint32_t stream, absl::Time deadline);
  StreamState state(uint32_t stream) { return streams_[stream]; }
  // Reads whatever frames are waiting, without blocking.
  void Poll();

  bool connection_closed() const { return closed_; }
  void Close();

  // A gRPC length-prefixed message: 0 (uncompressed), the length (big-endian), the bytes.
  static std::string GrpcMessage(absl::string_view message);
  // Just the 5-byte prefix announcing `length` bytes.
  static std::string GrpcPrefix(uint32_t length);

 private:
  explicit RawHttp2Client(int fd) : fd_(fd) {}

  bool WriteAll(absl::string_view bytes);
  void WriteFrame(uint8_t type, uint8_t flags, uint32_t stream, absl::string_view payload);
  // Reads and handles frames for up to `wait` (0: only what is there).
  void ReadFrames(absl::Duration wait);
  void HandleFrame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload);

  int fd_ = -1;
  bool closed_ = false;
  uint32_t next_stream_ = 1;
  std::string in_;  // bytes read, not yet a whole frame
  int64_t connection_window_ = 65535;
  int64_t peer_initial_window_ = 65535;
  std::map<uint32_t, int64_t> stream_windows_;
  std::map<uint32_t, StreamState> streams_;
};

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_RAW_HTTP2_CLIENT_H_
