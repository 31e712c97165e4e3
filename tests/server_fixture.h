// What the tests of a whole server in-process share: a config for 127.0.0.1:0, channels
// without size limits, requests with random operands, asynchronous calls, a plain HTTP
// GET for /metrics, and a fixture that starts the server.
#ifndef GEMMD_TESTS_SERVER_FIXTURE_H_
#define GEMMD_TESTS_SERVER_FIXTURE_H_

#include <arpa/inet.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "proto/proto_types.h"
#include "server/devices/backend.h"
#include "server/devices/cpu/cpu_device.h"
#include "server/devices/device.h"
#include "server/gemm_server.h"
#include "tests/fake_device.h"
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

// Polls `condition` until it holds (true) or `timeout` passes (false).
inline bool Eventually(const std::function<bool()>& condition,
                       absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time limit = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > limit) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// A test with one server in-process (the CPU backend, or a FakeDevice with the fake
// catalogue) and a stub on its own channel.
class InProcessServerTest : public ::testing::Test {
 protected:
  void Start(ServerConfig config = TestConfig()) {
    Start(config, OpenCpuBackend());
  }
  void Start(ServerConfig config, std::unique_ptr<FakeDevice> device) {
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(std::move(device));
    Start(config, FakeBackend(std::move(devices)));
  }
  void Start(ServerConfig config, Backend backend) {
    absl::StatusOr<std::unique_ptr<GemmServer>> server =
        GemmServer::CreateWithBackend(config, std::move(backend));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = ChannelTo(server_->port());
    stub_ = gemm::v1::GemmService::NewStub(channel_);
  }

  grpc::Status Call(const gemm::v1::MatmulRequest& request, gemm::v1::MatmulResponse* response,
                    absl::Duration timeout = absl::Seconds(60)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return stub_->Matmul(&context, request, response);
  }

  std::unique_ptr<GemmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gemm::v1::GemmService::Stub> stub_;
};

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_SERVER_FIXTURE_H_
