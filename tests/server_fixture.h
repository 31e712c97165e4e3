// What the tests of a whole server in-process share: a config for 127.0.0.1:0, channels
// without size limits, requests with random operands, and a plain HTTP GET for /metrics.
#ifndef GEMMD_TESTS_SERVER_FIXTURE_H_
#define GEMMD_TESTS_SERVER_FIXTURE_H_

#include <arpa/inet.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "proto/proto_types.h"
#include "server/gemm_server.h"
#include "tests/test_util.h"

namespace gemmd::testing {

inline ServerConfig TestConfig() {
  ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  // The metrics endpoint (civetweb) takes ~1 s to stop, so only tests that scrape it open it.
  config.metrics_port = -1;
  config.shutdown_grace = absl::Seconds(30);
  return config;
}

inline std::shared_ptr<grpc::Channel> ChannelTo(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each channel its own connection (tests that count connections rely on it).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

inline void SetTensor(gemm::v1::Tensor* t, std::vector<int64_t> shape, DataType type,
                      std::string data) {
  for (int64_t d : shape) t->add_shape(d);
  t->set_dtype(DataTypeToProto(type));
  t->set_data(std::move(data));
}

inline gemm::v1::MatmulRequest RandomRequest(int64_t m, int64_t n, int64_t k, uint64_t seed,
                                             DataType type = DataType::kFloat32) {
  std::mt19937_64 rng(seed);
  gemm::v1::MatmulRequest r;
  SetTensor(r.mutable_a(), {m, k}, type, RandomBytes(type, m * k, rng));
  SetTensor(r.mutable_b(), {k, n}, type, RandomBytes(type, k * n, rng));
  return r;
}

// An asynchronous Matmul whose outcome the test waits for. One still running when the
// test ends (a failed ASSERT) is cancelled and awaited, so gRPC never writes into it
// after it is gone.
struct AsyncCall {
  grpc::ClientContext context;
  gemm::v1::MatmulRequest request;
  gemm::v1::MatmulResponse response;
  grpc::Status status;
  absl::Notification done;
  bool started = false;

  ~AsyncCall() {
    if (!started) return;
    context.TryCancel();
    done.WaitForNotification();
  }

  void Start(gemm::v1::GemmService::Stub* stub) {
    started = true;
    stub->async()->Matmul(&context, &request, &response, [this](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
  }
};

// HTTP/1.0 GET on 127.0.0.1:port; empty on failure. Gives up after `timeout`.
inline std::string HttpGet(int port, const std::string& path,
                           absl::Duration timeout = absl::Seconds(30)) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout));
  tv.tv_usec = static_cast<suseconds_t>(absl::ToInt64Microseconds(timeout) % 1000000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
    }
  }
  close(fd);
  return response;
}

// The value of one exposition line, e.g. `gemm_requests_total{code="OK",...}`; -1 if absent.
inline double ScrapedValue(const std::string& page, const std::string& series) {
  const std::string line_start = "\n" + series + " ";
  const size_t pos = page.find(line_start);
  if (pos == std::string::npos) return -1;
  return std::stod(page.substr(pos + line_start.size()));
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_SERVER_FIXTURE_H_
