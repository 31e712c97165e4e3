// A GPU of the serving server fails a launch (one the runtime rejects: the context stays
// usable): its requests fail with INTERNAL and it is marked unhealthy; with another GPU
// the server keeps serving there, with none it reports NOT_SERVING and answers
// UNAVAILABLE. The trap variant is gpu_server_trap_test (its own process). Skips where
// there is no GPU. With two GPUs or more, resident tensors too: those on the faulted GPU
// answer UNAVAILABLE, those on another keep serving (skipped, saying so, on one GPU).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/reference_gemm.h"
#include "server/scheduling/batcher.h"
#include "server/devices/cuda/cuda_device_pool.h"
#include "tests/gpu/faulty_server.h"

namespace gemmd::testing {
namespace {

TEST(GpuServerFaultTest, AFaultedGpuLeavesTheOthersServing) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
  Served s = StartFaulty("all", FaultKind::kLaunchError);
  ASSERT_NE(s.server, nullptr);
  const grpc::Status faulted = s.CallsUntilTheFault();
  gemm::v1::MatmulResponse response;
  EXPECT_EQ(faulted.error_code(), grpc::StatusCode::INTERNAL) << faulted.error_message();
  EXPECT_EQ(s.server->executor().HealthyDevices(), gpus - 1);
  EXPECT_FALSE(s.FirstDeviceHealthy());
  if (gpus == 1) {
    s.AwaitHealth("NOT_SERVING");
    EXPECT_EQ(Health(s.channel.get()), "NOT_SERVING");
    EXPECT_EQ(s.Call(4, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  } else {
    for (uint64_t seed = 4; seed < 12; ++seed) {
      const grpc::Status after = s.Call(seed, &response);
      ASSERT_TRUE(after.ok()) << after.error_message();
      EXPECT_NE(response.device().rfind("cuda:0 ", 0), 0u) << response.device();
    }
    EXPECT_EQ(Health(s.channel.get()), "SERVING");
  }
  s.server->Shutdown();
}

// A [k, n] FLOAT32 weight kept on `device`: its handle ("" on failure).
std::string PutWeight(Served& s, const std::string& device, int64_t k, int64_t n,
                      const std::string& bytes) {
  grpc::ClientContext context;
  gemm::v1::PutTensorResponse handle;
  auto writer = s.stub->PutTensor(&context, &handle);
  gemm::v1::TensorChunk chunk;
  chunk.mutable_header()->add_shape(k);
  chunk.mutable_header()->add_shape(n);
  chunk.mutable_header()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  chunk.mutable_header()->set_device(device);
  chunk.set_data(bytes);
  writer->Write(chunk);
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return handle.handle();
}

TEST(GpuServerFaultTest, TensorsResidentOnAnotherGpuKeepServing) {
  const int gpus = CudaDeviceCount();
  if (gpus < 2) {
    GTEST_SKIP() << "needs two GPUs; this machine has " << gpus << ": multi-GPU test skipped";
  }
  Served s = StartFaulty("all", FaultKind::kLaunchError);
  ASSERT_NE(s.server, nullptr);
  const int64_t m = 33, k = 256, n = 96;
  std::mt19937_64 rng(7);
  const std::string w0 = RandomBytes(DataType::kFloat32, k * n, rng);
  const std::string w1 = RandomBytes(DataType::kFloat32, k * n, rng);
  const std::string h0 = PutWeight(s, "cuda:0", k, n, w0);
  const std::string h1 = PutWeight(s, "cuda:1", k, n, w1);
  auto call = [&](const std::string& handle, const std::string& weight,
                  gemm::v1::MatmulResponse* response) {
    gemm::v1::MatmulRequest request;
    const std::string a = RandomBytes(DataType::kFloat32, m * k, rng);
    request.mutable_a()->add_shape(m);
    request.mutable_a()->add_shape(k);
    request.mutable_a()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
    request.mutable_a()->set_data(a);
    request.mutable_b_ref()->set_handle(handle);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    const grpc::Status status = s.stub->Matmul(&context, request, response);
    if (status.ok()) {
      GemmProblem p;
      p.m = m;
      p.n = n;
      p.k = k;
      const std::vector<double> ref = ReferenceGemm(p, {a.data(), weight.data(), nullptr, nullptr});
      EXPECT_LE(RelativeError(ref.data(), response->c().data().data(), DataType::kFloat32, m * n),
                1e-5)
          << "on " << response->kernel();
    }
    return status;
  };
  // The wrapper faults cuda:0's third launch: the calls against its tensor meet it.
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(call(h0, w0, &response).ok());
  ASSERT_TRUE(call(h0, w0, &response).ok());
  EXPECT_EQ(response.device().rfind("cuda:0 ", 0), 0u) << response.device();
  EXPECT_EQ(call(h0, w0, &response).error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_FALSE(s.FirstDeviceHealthy());

  const grpc::Status lost = call(h0, w0, &response);
  EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(lost.error_message().find("is resident on cuda:0, which has faulted"),
            std::string::npos)
      << lost.error_message();
  for (int round = 0; round < 8; ++round) {
    const grpc::Status served = call(h1, w1, &response);
    ASSERT_TRUE(served.ok()) << served.error_message();
    EXPECT_EQ(response.device().rfind("cuda:1 ", 0), 0u) << response.device();
  }
  EXPECT_EQ(Health(s.channel.get()), "SERVING");
  s.server->Shutdown();
}

}  // namespace
}  // namespace gemmd::testing
