// Resident tensors on a server with two devices, on the CPU so that CI runs it: two
// CpuDevices stand in for two GPUs (the same Device interface, placement, batcher and
// store code as on the CUDA backend). Where PutTensor puts a tensor (with its caller's
// other tensors, or header.device), that a GEMM runs on the device of its tensors, that operands
// on two devices are refused saying where each is, that shared-weight batching still
// stacks on the second device, and that a fault on one device leaves the other serving,
// its tensors included, while the faulted device's tensors answer UNAVAILABLE.
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kernels/reference_gemm.h"
#include "server/devices/cpu/cpu_device.h"
#include "server/gemm_server.h"
#include "server/scheduling/batcher.h"
#include "tests/resident_server_fixture.h"
#include "tests/server_fixture.h"
#include "tests/test_util.h"

namespace gemmd::testing {
namespace {

constexpr int64_t kK = 24, kN = 16;  // every weight here is [K, N] float32

class MultiDeviceServerTest : public ResidentServerTest {
 protected:
  void StartTwo(ServerConfig config) {
    auto first = std::make_unique<ControlledCpu>(0);
    auto second = std::make_unique<ControlledCpu>(1);
    cpu0_ = first.get();
    cpu1_ = second.get();
    Backend backend = OpenCpuBackend();
    backend.devices.clear();
    backend.devices.push_back(std::move(first));
    backend.devices.push_back(std::move(second));
    Start(config, std::move(backend));
  }

  // A random [K, N] weight on `device` ("" = the server's choice): its handle (the bytes
  // in *bytes).
  std::string PutWeight(std::string* bytes, const std::string& device = "") {
    *bytes = RandomBytes(DataType::kFloat32, kK * kN, rng_);
    absl::StatusOr<std::string> handle = PutDense({kK, kN}, *bytes, 1000, 0, device);
    EXPECT_TRUE(handle.ok()) << handle.status();
    return handle.ok() ? *handle : "";
  }

  // C = A W for a random inline A [m, K] and the weight by handle; on OK, C is checked
  // against the FP64 reference.
  grpc::Status CallAgainst(const std::string& handle, const std::string& weight,
                           gemm::v1::MatmulResponse* response, int64_t m = 5) {
    gemm::v1::MatmulRequest request;
    const std::string a = RandomBytes(DataType::kFloat32, m * kK, rng_);
    SetTensor(request.mutable_a(), {m, kK}, DataType::kFloat32, a);
    request.mutable_b_ref()->set_handle(handle);
    const grpc::Status status = Call(request, response);
    if (status.ok()) ExpectProduct(a, weight, m, response->c().data());
    return status;
  }

  static void ExpectProduct(const std::string& a, const std::string& weight, int64_t m,
                            const std::string& c) {
    GemmProblem p;
    p.m = m;
    p.n = kN;
    p.k = kK;
    EXPECT_LE(MaxRelError(ReferenceGemm(p, {a.data(), weight.data(), nullptr, nullptr}),
                          AsFloats(c)),
              1e-5);
  }

  // The device ListTensors shows for `handle` ("" if it is not listed).
  std::string ListedDevice(const std::string& handle) {
    const gemm::v1::ListTensorsResponse listed = List();
    for (const gemm::v1::TensorInfo& t : listed.tensors()) {
      if (t.handle().handle() == handle) return t.device();
    }
    return "";
  }

  std::string Health() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    if (!health->Check(&context, {}, &response).ok()) return "ERROR";
    return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  }

  ControlledCpu* cpu0_ = nullptr;
  ControlledCpu* cpu1_ = nullptr;
};

// A caller's tensors stay together unless it names devices: put x, put w, matmul(x, w)
// works as written (the store once spread them, and the GEMM was refused for operands on
// two devices). Named devices spread them, and each GEMM runs where its tensors are.
TEST_F(MultiDeviceServerTest, TensorsFollowTheirCallerAndGemmsRunWhereTheirTensorsAre) {
  StartTwo(Config());
  std::string w0, w1;
  const std::string h0 = PutWeight(&w0);  // both devices empty: the first
  EXPECT_TRUE(absl::StartsWith(ListedDevice(h0), "cpu:0 ")) << ListedDevice(h0);
  const int64_t m = 3;
  const std::string x = RandomBytes(DataType::kFloat32, m * kK, rng_);
  absl::StatusOr<std::string> x_handle = PutDense({m, kK}, x);  // with the weight
  ASSERT_TRUE(x_handle.ok()) << x_handle.status();
  EXPECT_TRUE(absl::StartsWith(ListedDevice(*x_handle), "cpu:0 ")) << ListedDevice(*x_handle);
  gemm::v1::MatmulRequest natural;
  natural.mutable_a_ref()->set_handle(*x_handle);
  natural.mutable_b_ref()->set_handle(h0);
  gemm::v1::MatmulResponse response;
  const grpc::Status s = Call(natural, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectProduct(x, w0, m, response.c().data());

  const std::string h1 = PutWeight(&w1, "cpu:1");
  EXPECT_TRUE(absl::StartsWith(ListedDevice(h1), "cpu:1 ")) << ListedDevice(h1);
  gemm::v1::TensorHeader header;
  EXPECT_EQ(Get(h1, &header), w1);
  EXPECT_EQ(header.device(), "cpu:1");

  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(CallAgainst(h1, w1, &response).ok());
    EXPECT_TRUE(absl::StartsWith(response.device(), "cpu:1 ")) << response.device();
    ASSERT_TRUE(CallAgainst(h0, w0, &response).ok());
    EXPECT_TRUE(absl::StartsWith(response.device(), "cpu:0 ")) << response.device();
  }
  EXPECT_EQ(cpu0_->launches().size(), 4u);
  EXPECT_EQ(cpu1_->launches().size(), 3u);
}

TEST_F(MultiDeviceServerTest, NamedDevicesColocateOperandsAndMixedDevicesAreRefused) {
  StartTwo(Config());
  const int64_t m = 6;
  const std::string a = RandomBytes(DataType::kFloat32, m * kK, rng_);
  absl::StatusOr<std::string> a_handle = PutDense({m, kK}, a, 1000, 0, "cpu:1");
  ASSERT_TRUE(a_handle.ok()) << a_handle.status();
  std::string w, w_near;
  const std::string elsewhere = PutWeight(&w, "cpu:0");
  ASSERT_TRUE(absl::StartsWith(ListedDevice(elsewhere), "cpu:0 "));

  gemm::v1::MatmulRequest request;
  request.mutable_a_ref()->set_handle(*a_handle);
  request.mutable_b_ref()->set_handle(elsewhere);
  gemm::v1::MatmulResponse response;
  grpc::Status s = Call(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "A is resident on cpu:1 and B on cpu:0; one GEMM reads the resident operands of "
            "one device (upload them with the same header.device; ListTensors shows where "
            "each one is)");

  // The whole listed name is accepted as well as the id; kept results stay on the device.
  const std::string near = PutWeight(&w_near, ListedDevice(*a_handle));
  ASSERT_TRUE(absl::StartsWith(ListedDevice(near), "cpu:1 ")) << ListedDevice(near);
  request.mutable_b_ref()->set_handle(near);
  request.mutable_keep_c()->set_label("kept");
  s = Call(request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(absl::StartsWith(response.device(), "cpu:1 ")) << response.device();
  EXPECT_TRUE(absl::StartsWith(ListedDevice(response.c_ref().handle()), "cpu:1 "));
  ExpectProduct(a, w_near, m, Get(response.c_ref().handle()));

  const int64_t used = server_->store()->used_bytes();
  absl::StatusOr<std::string> unknown = PutDense({2, 2}, std::string(16, '\0'), 1000, 0, "cpu:9");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "header.device \"cpu:9\" is no device of this server; its devices: cpu:0, cpu:1");
  EXPECT_EQ(server_->store()->used_bytes(), used);
}

TEST_F(MultiDeviceServerTest, CallsAgainstAWeightOnTheSecondDeviceStackThere) {
  ServerConfig config = Config();
  config.max_queue_delay = absl::Seconds(1);  // a batch forms when the device frees
  StartTwo(config);
  std::string w;
  const std::string handle = PutWeight(&w, "cpu:1");
  // A first call holds cpu:1; four more, each its own M, wait for it and then go as one.
  const std::vector<int64_t> ms = {1, 2, 3, 1, 4};
  std::vector<std::unique_ptr<AsyncCall>> calls;
  StartBehindTheFirst(cpu1_, ms.size(), [&](size_t i) {
    auto call = std::make_unique<AsyncCall>();
    SetTensor(call->request.mutable_a(), {ms[i], kK}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, ms[i] * kK, rng_));
    call->request.mutable_b_ref()->set_handle(handle);
    call->Start(stub_.get());
    calls.push_back(std::move(call));
  });
  for (size_t i = 0; i < ms.size(); ++i) {
    calls[i]->done.WaitForNotification();
    ASSERT_TRUE(calls[i]->status.ok()) << calls[i]->status.error_message();
    EXPECT_TRUE(absl::StartsWith(calls[i]->response.device(), "cpu:1 "));
    ExpectProduct(calls[i]->request.a().data(), w, ms[i], calls[i]->response.c().data());
    EXPECT_EQ(calls[i]->response.timing().batch_size(), i == 0 ? 1u : 4u);
  }
  const std::vector<ControlledCpu::Launch> launches = cpu1_->launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].items, 4);
  EXPECT_TRUE(launches[1].stacked);
  EXPECT_EQ(launches[1].m, 2 + 3 + 1 + 4);
  EXPECT_TRUE(cpu0_->launches().empty());  // the idle device took none of them
}

TEST_F(MultiDeviceServerTest, AFaultedDeviceLeavesTheOtherServingItsTensors) {
  StartTwo(Config());
  std::string w0, w1;
  const std::string h0 = PutWeight(&w0, "cpu:0");
  const std::string h1 = PutWeight(&w1, "cpu:1");
  cpu0_->FaultNextRun();
  gemm::v1::MatmulResponse response;
  grpc::Status s = CallAgainst(h0, w0, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "cpu:0 faulted")) << s.error_message();
  ASSERT_TRUE(Eventually([&] { return server_->executor().HealthyDevices() == 1; }));

  // The faulted device's tensor is lost, and every use of it says so.
  const std::string lost = absl::StrCat(
      "tensor ", h0, " is resident on cpu:0, which has faulted: the tensor is lost (delete it "
      "and upload it again; a new upload goes to a healthy device)");
  s = CallAgainst(h0, w0, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.error_message(), lost);
  const grpc::Status read = RefusedGet(h0);
  EXPECT_EQ(read.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(read.error_message(), lost);
  EXPECT_TRUE(Delete(h0).ok());

  // The other device serves its tensors and everything inline, and health stays SERVING.
  for (int round = 0; round < 4; ++round) {
    s = CallAgainst(h1, w1, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(absl::StartsWith(response.device(), "cpu:1 ")) << response.device();
    gemm::v1::MatmulRequest inline_request;
    SetTensor(inline_request.mutable_a(), {3, kK}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, 3 * kK, rng_));
    SetTensor(inline_request.mutable_b(), {kK, kN}, DataType::kFloat32, w1);
    s = Call(inline_request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(absl::StartsWith(response.device(), "cpu:1 ")) << response.device();
  }
  EXPECT_EQ(Health(), "SERVING");
  {
    grpc::ClientContext context;
    gemm::v1::ServerInfo info;
    ASSERT_TRUE(stub_->GetServerInfo(&context, {}, &info).ok());
    ASSERT_EQ(info.devices_size(), 2);
    EXPECT_FALSE(info.devices(0).healthy());
    EXPECT_TRUE(info.devices(1).healthy());
  }

  // New tensors go to the healthy device; the faulted one, asked by name, refuses.
  absl::StatusOr<std::string> refused =
      PutDense({kK, kN}, w0, 1000, 0, "cpu:0");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(),
            "header.device cpu:0 has faulted; it keeps no tensors (leave the field empty for "
            "a healthy device)");
  std::string w2;
  const std::string h2 = PutWeight(&w2);
  EXPECT_TRUE(absl::StartsWith(ListedDevice(h2), "cpu:1 ")) << ListedDevice(h2);
  ASSERT_TRUE(CallAgainst(h2, w2, &response).ok());

  // The last device faults: nothing serves.
  cpu1_->FaultNextRun();
  EXPECT_EQ(CallAgainst(h1, w1, &response).error_code(), grpc::StatusCode::INTERNAL);
  ASSERT_TRUE(Eventually([&] { return Health() == "NOT_SERVING"; }));
  gemm::v1::MatmulRequest inline_request;
  SetTensor(inline_request.mutable_a(), {3, kK}, DataType::kFloat32, w1.substr(0, 3 * kK * 4));
  SetTensor(inline_request.mutable_b(), {kK, kN}, DataType::kFloat32, w1);
  EXPECT_EQ(Call(inline_request, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace gemmd::testing
