// hostile-client: the misbehaving callers of the robustness tests as a command, for the
// measurements in docs/RELIABILITY.md (bench/cpu_robustness_bench.sh).
//
//   hostile-client never-read --port P --calls N --m M --n N --k K [--hold_s S]
//       one HTTP/2 connection that announces a zero receive window, N Matmul calls
//       (FP32 random [M,K] x [K,N]), then holds the connection S seconds without reading
//       a byte of DATA; prints how many calls were answered (refused) and how many hang.
//   hostile-client oversize --port P --prefix_bytes L [--send_bytes B]
//       one Matmul call whose length prefix announces L bytes, then zeros as fast as the
//       server's windows allow, until the stream ends or B bytes are sent; prints the
//       bytes sent, how the stream ended and how long it took.
//   hostile-client download-never-read --port P --handle H --streams N [--connections C]
//                  [--hold_s S]
//       C connections (default 2) with HTTP/2's default windows, never replenished, N
//       GetTensor streams of tensor H spread over them, held S seconds without reading;
//       prints how many streams ended (refused) and how many hang.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/raw_http2_client.h"
#include "tests/server_fixture.h"

namespace {

using ::gemmd::testing::RawHttp2Client;

constexpr char kMatmulPath[] = "/gemm.v1.GemmService/Matmul";
constexpr char kGetTensorPath[] = "/gemm.v1.GemmService/GetTensor";

std::string StringFlag(int argc, char** argv, const std::string& name) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return "";
}

int64_t Flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    int64_t v = 0;
    if (argv[i] == "--" + name && absl::SimpleAtoi(argv[i + 1], &v)) return v;
  }
  return fallback;
}

int NeverRead(int argc, char** argv) {
  const int port = static_cast<int>(Flag(argc, argv, "port", 50051));
  const int calls = static_cast<int>(Flag(argc, argv, "calls", 8));
  const int64_t m = Flag(argc, argv, "m", 8192), n = Flag(argc, argv, "n", 8192),
                k = Flag(argc, argv, "k", 1);
  const int64_t hold_s = Flag(argc, argv, "hold_s", 10);
  absl::StatusOr<std::unique_ptr<RawHttp2Client>> client = RawHttp2Client::Connect(port, 0);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  const std::string message = RawHttp2Client::GrpcMessage(
      gemmd::testing::RandomRequest(m, n, k, 1).SerializeAsString());
  std::vector<uint32_t> streams;
  for (int i = 0; i < calls; ++i) {
    streams.push_back((*client)->StartCall(kMatmulPath));
    (*client)->SendData(streams.back(), message, /*end_stream=*/true);
  }
  const absl::Time until = absl::Now() + absl::Seconds(hold_s);
  while (absl::Now() < until && !(*client)->connection_closed()) {
    (*client)->Poll();
    absl::SleepFor(absl::Milliseconds(20));
  }
  int answered = 0, hanging = 0;
  for (uint32_t s : streams) ((*client)->state(s).ended ? answered : hanging)++;
  std::printf("never-read: %d calls of %lld bytes each (result %lld bytes): %d answered "
              "(refused), %d hanging after %lld s\n",
              calls, static_cast<long long>(message.size()),
              static_cast<long long>(m * n * 4), answered, hanging,
              static_cast<long long>(hold_s));
  (*client)->Close();
  return 0;
}

int Oversize(int argc, char** argv) {
  const int port = static_cast<int>(Flag(argc, argv, "port", 50051));
  const int64_t prefix = Flag(argc, argv, "prefix_bytes", int64_t{1900} << 20);
  const int64_t limit = Flag(argc, argv, "send_bytes", prefix);
  absl::StatusOr<std::unique_ptr<RawHttp2Client>> client =
      RawHttp2Client::Connect(port, 65535);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  const uint32_t stream = (*client)->StartCall(kMatmulPath);
  const absl::Time start = absl::Now();
  (*client)->SendData(stream, RawHttp2Client::GrpcPrefix(static_cast<uint32_t>(prefix)), false);
  const std::string chunk(1 << 20, '\0');
  int64_t sent = 0;
  const absl::Time give_up = start + absl::Seconds(120);
  while (!(*client)->state(stream).ended && sent < limit && absl::Now() < give_up) {
    const int64_t n = (*client)->SendData(stream, chunk, false, give_up);
    if (n == 0 && (*client)->connection_closed()) break;
    sent += n;
  }
  const RawHttp2Client::StreamState end =
      (*client)->AwaitEnd(stream, absl::Now() + absl::Seconds(30));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("oversize: prefix %lld bytes, sent %lld, stream %s%s after %.3f s\n",
              static_cast<long long>(prefix), static_cast<long long>(sent),
              end.ended ? "ended" : "still open",
              end.rst_code >= 0 ? absl::StrCat(" by RST_STREAM code ", end.rst_code).c_str()
                                : (end.ended ? " with trailers" : ""),
              seconds);
  return end.ended ? 0 : 2;
}

int DownloadNeverRead(int argc, char** argv) {
  const int port = static_cast<int>(Flag(argc, argv, "port", 50051));
  const int streams = static_cast<int>(Flag(argc, argv, "streams", 600));
  const int connections =
      static_cast<int>(std::max<int64_t>(1, Flag(argc, argv, "connections", 2)));
  const int64_t hold_s = Flag(argc, argv, "hold_s", 10);
  gemm::v1::TensorHandle handle;
  handle.set_handle(StringFlag(argc, argv, "handle"));
  const std::string message = RawHttp2Client::GrpcMessage(handle.SerializeAsString());
  std::vector<std::unique_ptr<RawHttp2Client>> clients;
  for (int c = 0; c < connections; ++c) {
    // HTTP/2's default windows, never replenished: the server sends the header and the
    // first 64 KiB, then every stream's next chunk waits in the server.
    absl::StatusOr<std::unique_ptr<RawHttp2Client>> client =
        RawHttp2Client::Connect(port, 65535);
    if (!client.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
      return 1;
    }
    clients.push_back(*std::move(client));
  }
  std::vector<std::pair<int, uint32_t>> ids;
  for (int i = 0; i < streams; ++i) {
    RawHttp2Client& client = *clients[static_cast<size_t>(i % connections)];
    ids.emplace_back(i % connections, client.StartCall(kGetTensorPath));
    client.SendData(ids.back().second, message, /*end_stream=*/true);
  }
  const absl::Time until = absl::Now() + absl::Seconds(hold_s);
  while (absl::Now() < until) {
    for (auto& client : clients) client->Poll();
    absl::SleepFor(absl::Milliseconds(20));
  }
  int ended = 0, hanging = 0;
  for (const auto& [c, id] : ids)
    (clients[static_cast<size_t>(c)]->state(id).ended ? ended : hanging)++;
  std::printf(
      "download-never-read: %d GetTensor streams on %d connections: %d ended "
      "(refused), %d hanging after %lld s\n",
      streams, connections, ended, hanging, static_cast<long long>(hold_s));
  for (auto& client : clients) client->Close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "never-read") return NeverRead(argc, argv);
  if (mode == "oversize") return Oversize(argc, argv);
  if (mode == "download-never-read") return DownloadNeverRead(argc, argv);
  std::fprintf(stderr,
               "usage: hostile-client never-read --port P --calls N --m M --n N --k K "
               "[--hold_s S]\n"
               "       hostile-client oversize --port P --prefix_bytes L [--send_bytes B]\n"
               "       hostile-client download-never-read --port P --handle H --streams N "
               "[--connections C] [--hold_s S]\n");
  return 2;
}
