#include "tests/raw_http2_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gemmd::testing {
namespace {

constexpr uint8_t kData = 0, kHeaders = 1, kRstStream = 3, kSettings = 4, kPing = 6,
                  kGoaway = 7, kWindowUpdate = 8;
constexpr uint8_t kEndStream = 0x1, kAck = 0x1, kEndHeaders = 0x4;
constexpr size_t kMaxFrame = 16384;  // the default SETTINGS_MAX_FRAME_SIZE

void Put32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

uint32_t Get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

// An HPACK integer with an N-bit prefix (RFC 7541 5.1); the first byte's high bits are 0.
void PutHpackInt(std::string* out, uint64_t value, int prefix_bits) {
  const uint64_t max_prefix = (uint64_t{1} << prefix_bits) - 1;
  if (value < max_prefix) {
    out->push_back(static_cast<char>(value));
    return;
  }
  out->push_back(static_cast<char>(max_prefix));
  value -= max_prefix;
  while (value >= 128) {
    out->push_back(static_cast<char>((value % 128) + 128));
    value /= 128;
  }
  out->push_back(static_cast<char>(value));
}

// "Literal Header Field without Indexing -- New Name", no Huffman coding.
void PutHeader(std::string* block, absl::string_view name, absl::string_view value) {
  block->push_back(0x00);
  PutHpackInt(block, name.size(), 7);
  block->append(name.data(), name.size());
  PutHpackInt(block, value.size(), 7);
  block->append(value.data(), value.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<RawHttp2Client>> RawHttp2Client::Connect(
    int port, uint32_t initial_window_bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port, " failed"));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::unique_ptr<RawHttp2Client> client(new RawHttp2Client(fd));
  if (!client->WriteAll("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")) {
    return absl::UnavailableError("writing the preface failed");
  }
  std::string settings;
  settings.push_back(0);
  settings.push_back(0x4);  // SETTINGS_INITIAL_WINDOW_SIZE
  Put32(&settings, initial_window_bytes);
  settings.push_back(0);
  settings.push_back(0x2);  // SETTINGS_ENABLE_PUSH = 0
  Put32(&settings, 0);
  client->WriteFrame(kSettings, 0, 0, settings);
  return client;
}

RawHttp2Client::~RawHttp2Client() { Close(); }

void RawHttp2Client::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  closed_ = true;
}

std::string RawHttp2Client::GrpcPrefix(uint32_t length) {
  std::string prefix(1, '\0');
  Put32(&prefix, length);
  return prefix;
}

std::string RawHttp2Client::GrpcMessage(absl::string_view message) {
  return absl::StrCat(GrpcPrefix(static_cast<uint32_t>(message.size())), message);
}

bool RawHttp2Client::WriteAll(absl::string_view bytes) {
  while (!bytes.empty() && fd_ >= 0) {
    const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Close();
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return bytes.empty();
}

void RawHttp2Client::WriteFrame(uint8_t type, uint8_t flags, uint32_t stream,
                                absl::string_view payload) {
  std::string frame;
  frame.push_back(static_cast<char>(payload.size() >> 16));
  frame.push_back(static_cast<char>(payload.size() >> 8));
  frame.push_back(static_cast<char>(payload.size()));
  frame.push_back(static_cast<char>(type));
  frame.push_back(static_cast<char>(flags));
  Put32(&frame, stream & 0x7fffffffu);
  frame.append(payload.data(), payload.size());
  WriteAll(frame);
}

uint32_t RawHttp2Client::StartCall(absl::string_view path, absl::Duration timeout) {
  const uint32_t stream = next_stream_;
  next_stream_ += 2;
  std::string block;
  PutHeader(&block, ":method", "POST");
  PutHeader(&block, ":scheme", "http");
  PutHeader(&block, ":path", path);
  PutHeader(&block, ":authority", "127.0.0.1");
  PutHeader(&block, "content-type", "application/grpc");
  PutHeader(&block, "te", "trailers");
  if (timeout != absl::InfiniteDuration()) {
    PutHeader(&block, "grpc-timeout", absl::StrCat(absl::ToInt64Milliseconds(timeout), "m"));
  }
  stream_windows_[stream] = peer_initial_window_;
  streams_[stream] = StreamState();
  WriteFrame(kHeaders, kEndHeaders, stream, block);
  return stream;
}

int64_t RawHttp2Client::SendData(uint32_t stream, absl::string_view bytes, bool end_stream,
                                 absl::Time deadline) {
  int64_t sent = 0;
  while (fd_ >= 0 && !streams_[stream].ended) {
    ReadFrames(absl::ZeroDuration());
    const int64_t window = std::min(connection_window_, stream_windows_[stream]);
    const size_t left = bytes.size() - static_cast<size_t>(sent);
    if (left == 0 && !end_stream) break;
    if (window <= 0 && left > 0) {
      if (absl::Now() >= deadline) break;
      ReadFrames(absl::Milliseconds(5));  // wait for WINDOW_UPDATE
      continue;
    }
    const size_t n = std::min<size_t>({left, kMaxFrame, static_cast<size_t>(std::max<int64_t>(window, 0))});
    const bool last = n == left;
    WriteFrame(kData, last && end_stream ? kEndStream : 0, stream,
               bytes.substr(static_cast<size_t>(sent), n));
    connection_window_ -= static_cast<int64_t>(n);
    stream_windows_[stream] -= static_cast<int64_t>(n);
    sent += static_cast<int64_t>(n);
    if (last) break;
  }
  return sent;
}

RawHttp2Client::StreamState RawHttp2Client::AwaitEnd(uint32_t stream, absl::Time deadline) {
  while (fd_ >= 0 && !streams_[stream].ended && absl::Now() < deadline) {
    ReadFrames(std::min(absl::Milliseconds(20), deadline - absl::Now()));
  }
  return streams_[stream];
}

void RawHttp2Client::Poll() { ReadFrames(absl::ZeroDuration()); }

void RawHttp2Client::ReadFrames(absl::Duration wait) {
  if (fd_ < 0) return;
  pollfd p{fd_, POLLIN, 0};
  const int timeout_ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(wait)));
  if (poll(&p, 1, timeout_ms) <= 0) return;
  char buffer[65536];
  while (fd_ >= 0) {
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Close();
      for (auto& [id, s] : streams_) s.ended = true;
      break;
    }
    in_.append(buffer, static_cast<size_t>(n));
  }
  while (in_.size() >= 9) {
    const size_t length = (static_cast<uint8_t>(in_[0]) << 16) |
                          (static_cast<uint8_t>(in_[1]) << 8) | static_cast<uint8_t>(in_[2]);
    if (in_.size() < 9 + length) break;
    const uint8_t type = static_cast<uint8_t>(in_[3]);
    const uint8_t flags = static_cast<uint8_t>(in_[4]);
    const uint32_t stream = Get32(in_, 5) & 0x7fffffffu;
    const std::string payload = in_.substr(9, length);
    in_.erase(0, 9 + length);
    HandleFrame(type, flags, stream, payload);
  }
}

void RawHttp2Client::HandleFrame(uint8_t type, uint8_t flags, uint32_t stream,
                                 const std::string& payload) {
  switch (type) {
    case kSettings:
      if ((flags & kAck) == 0) {
        for (size_t at = 0; at + 6 <= payload.size(); at += 6) {
          const uint16_t id = static_cast<uint16_t>((static_cast<uint8_t>(payload[at]) << 8) |
                                                    static_cast<uint8_t>(payload[at + 1]));
          if (id == 0x4) {  // INITIAL_WINDOW_SIZE: applies to every open stream
            const int64_t value = Get32(payload, at + 2);
            for (auto& [id2, window] : stream_windows_) window += value - peer_initial_window_;
            peer_initial_window_ = value;
          }
        }
        WriteFrame(kSettings, kAck, 0, "");
      }
      break;
    case kPing:
      if ((flags & kAck) == 0) WriteFrame(kPing, kAck, 0, payload);
      break;
    case kWindowUpdate:
      if (payload.size() == 4) {
        const int64_t increment = Get32(payload, 0) & 0x7fffffffu;
        if (stream == 0) {
          connection_window_ += increment;
        } else {
          stream_windows_[stream] += increment;
        }
      }
      break;
    case kHeaders:
      streams_[stream].got_headers = true;
      if (flags & kEndStream) streams_[stream].ended = true;
      break;
    case kData:
      streams_[stream].data_bytes += static_cast<int64_t>(payload.size());
      if (flags & kEndStream) streams_[stream].ended = true;
      break;
    case kRstStream:
      streams_[stream].ended = true;
      if (payload.size() == 4) streams_[stream].rst_code = static_cast<int>(Get32(payload, 0));
      break;
    case kGoaway:
      break;  // streams already open go on; the tests open no new ones after it
    default:
      break;
  }
}

}  // namespace gemmd::testing
