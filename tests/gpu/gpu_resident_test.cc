// Resident tensors on the CUDA backend, through the whole server over gRPC: tensors kept
// in device memory, read in place by the dense and quantized launches, results kept on
// the device, and callers against one weight stacked into one launch. Each result is
// checked against FP64 (FP32: 1e-5 relative; FP16 tensor path: 2e-3; quantized weights:
// 1e-5 against the dequantized weight). With several GPUs every tensor goes to the last
// one (header.device), so a GPU other than the first serves them, and the round trip
// runs on each. Skips where there is no GPU.
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/quant_formats.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "proto/quantized_tensor.h"
#include "server/devices/cuda/cuda_device_pool.h"
#include "server/gemm_server.h"
#include "server/observability/log.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::RandomBytes;

// The relative error of C (FP32 bytes, [m, n]) against FP64 A [m, k] * B^T (B [n, k]).
double ErrorOfABt(const float* a, const float* b, int64_t m, int64_t n, int64_t k,
                  const std::string& c) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_b = true;
  const std::vector<double> ref = ReferenceGemm(p, {a, b, nullptr, nullptr});
  return RelativeError(ref.data(), c.data(), DataType::kFloat32, m * n);
}

class GpuResidentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus_ = CudaDeviceCount();
    if (gpus_ == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
    device_ = absl::StrCat("cuda:", gpus_ - 1);
    SetLogEnabled(false);
    ServerConfig config;
    config.host = "127.0.0.1";
    config.port = 0;
    config.metrics_port = -1;
    config.backend = "cuda";
    config.tensor_store_bytes = int64_t{1} << 30;
    config.quantized_layout = quantized_layout_;
    absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = gemm::v1::GemmService::NewStub(channel_);
  }
  void TearDown() override { SetLogEnabled(true); }

  // Uploads to header.device, or to device_ when that is empty.
  std::string Put(const gemm::v1::TensorHeader& header, const std::string& data,
                  const std::string& scales = "") {
    grpc::ClientContext context;
    gemm::v1::PutTensorResponse handle;
    auto writer = stub_->PutTensor(&context, &handle);
    gemm::v1::TensorChunk first;
    *first.mutable_header() = header;
    if (header.device().empty()) first.mutable_header()->set_device(device_);
    writer->Write(first);
    constexpr size_t kChunk = 3 << 20;
    for (size_t at = 0; at < data.size(); at += kChunk) {
      gemm::v1::TensorChunk chunk;
      chunk.set_data(data.substr(at, kChunk));
      writer->Write(chunk);
    }
    for (size_t at = 0; at < scales.size(); at += kChunk) {
      gemm::v1::TensorChunk chunk;
      chunk.set_scales(scales.substr(at, kChunk));
      writer->Write(chunk);
    }
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return handle.handle();
  }

  std::string Get(const std::string& handle, std::string* scales = nullptr) {
    grpc::ClientContext context;
    gemm::v1::GetTensorRequest request;
    request.set_handle(handle);
    auto reader = stub_->GetTensor(&context, request);
    gemm::v1::TensorChunk chunk;
    std::string data;
    while (reader->Read(&chunk)) {
      data += chunk.data();
      if (scales != nullptr) *scales += chunk.scales();
    }
    EXPECT_TRUE(reader->Finish().ok());
    return data;
  }

  static gemm::v1::TensorHeader Dense(std::vector<int64_t> shape, DataType type) {
    gemm::v1::TensorHeader header;
    for (int64_t d : shape) header.add_shape(d);
    header.set_dtype(DataTypeToProto(type));
    return header;
  }

  // NVFP4 A [m, k] and B [n, k] (N(0,1) values) stored, then QuantizedMatmul by both
  // handles: its kernel starts with `kernel_prefix`, and C is within 1e-5 of FP64 on the
  // dequantized operands.
  void ExpectBothQuantizedByReference(int64_t m, int64_t n, int64_t k, uint64_t seed,
                                      const std::string& kernel_prefix) {
    std::mt19937_64 rng(seed);
    auto quantize = [&](int64_t rows, std::vector<float>* deq) {
      const std::string x = RandomBytes(DataType::kFloat32, rows * k, rng);
      const Nvfp4Matrix q = *QuantizeNvfp4(reinterpret_cast<const float*>(x.data()), rows, k);
      deq->resize(static_cast<size_t>(rows * k));
      EXPECT_TRUE(DequantizeNvfp4(q, deq->data()).ok());
      gemm::v1::TensorHeader header;
      header.add_shape(rows);
      header.add_shape(k);
      header.set_format(gemm::v1::QUANT_FORMAT_NVFP4);
      header.set_tensor_scale(q.tensor_scale);
      return Put(header, std::string(q.packed.begin(), q.packed.end()),
                 std::string(q.block_scales.begin(), q.block_scales.end()));
    };
    std::vector<float> a, b;
    gemm::v1::QuantizedMatmulRequest request;
    request.mutable_a_ref()->set_handle(quantize(m, &a));
    request.mutable_b_ref()->set_handle(quantize(n, &b));
    gemm::v1::MatmulResponse response;
    grpc::ClientContext context;
    const grpc::Status s = stub_->QuantizedMatmul(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.kernel().rfind(kernel_prefix, 0), 0u) << response.kernel();
    EXPECT_LE(ErrorOfABt(a.data(), b.data(), m, n, k, response.c().data()), 1e-5)
        << response.kernel();
  }

  std::string quantized_layout_ = "auto";
  int gpus_ = 0;
  std::string device_;  // where Put keeps tensors: the last GPU
  std::unique_ptr<GemmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gemm::v1::GemmService::Stub> stub_;
};

struct Pending {
  grpc::ClientContext context;
  gemm::v1::MatmulResponse response;
  grpc::Status status;
  absl::Notification done;
};

TEST_F(GpuResidentTest, TensorsRoundTripThroughDeviceMemory) {
  std::mt19937_64 rng(1);
  const std::string bytes = RandomBytes(DataType::kFloat32, 3 * 1024 * 1024 + 17, rng);
  for (int gpu = 0; gpu < gpus_; ++gpu) {
    gemm::v1::TensorHeader header = Dense({1, 3 * 1024 * 1024 + 17}, DataType::kFloat32);
    header.set_device(absl::StrCat("cuda:", gpu));
    EXPECT_EQ(Get(Put(header, bytes)), bytes) << header.device();
  }
}

TEST_F(GpuResidentTest, DenseCallersAgainstOneResidentBAreCorrectAndShareLaunches) {
  for (const auto& [type, tolerance] : {std::pair{DataType::kFloat32, 1e-5},
                                        std::pair{DataType::kFloat16, 2e-3}}) {
    SCOPED_TRACE(DataTypeName(type));
    std::mt19937_64 rng(2);
    const int64_t k = 384, n = 200;
    const std::string b = RandomBytes(type, k * n, rng);
    const std::string handle = Put(Dense({k, n}, type), b);
    constexpr int kCalls = 48;
    std::vector<gemm::v1::MatmulRequest> requests(kCalls);
    std::vector<std::unique_ptr<Pending>> pending;
    for (int i = 0; i < kCalls; ++i) {
      const int64_t m = 1 + (i * 7) % 23;
      gemm::v1::Tensor* a = requests[i].mutable_a();
      a->add_shape(m);
      a->add_shape(k);
      a->set_dtype(DataTypeToProto(type));
      a->set_data(RandomBytes(type, m * k, rng));
      requests[i].mutable_b_ref()->set_handle(handle);
      pending.push_back(std::make_unique<Pending>());
      Pending* p = pending.back().get();
      stub_->async()->Matmul(&p->context, &requests[i], &p->response, [p](grpc::Status s) {
        p->status = std::move(s);
        p->done.Notify();
      });
    }
    uint32_t largest_batch = 0;
    for (int i = 0; i < kCalls; ++i) {
      pending[i]->done.WaitForNotification();
      ASSERT_TRUE(pending[i]->status.ok()) << pending[i]->status.error_message();
      GemmProblem p;
      p.m = requests[i].a().shape(0);
      p.n = n;
      p.k = k;
      p.a_type = p.b_type = type;
      const std::vector<double> ref =
          ReferenceGemm(p, {requests[i].a().data().data(), b.data(), nullptr, nullptr});
      EXPECT_LE(RelativeError(ref.data(), pending[i]->response.c().data().data(),
                              DataType::kFloat32, p.m * n),
                tolerance)
          << "caller " << i;
      largest_batch = std::max(largest_batch, pending[i]->response.timing().batch_size());
    }
    // 48 calls at once on one GPU: the queue forms batches (stacked against the weight).
    EXPECT_GT(largest_batch, 1u);
  }
}

TEST_F(GpuResidentTest, ResidentAAndCInAndAKeptResult) {
  std::mt19937_64 rng(3);
  const int64_t m = 130, k = 96, n = 70;
  const std::string a = RandomBytes(DataType::kFloat32, k * m, rng);  // stored [K, M]
  const std::string b = RandomBytes(DataType::kFloat32, k * n, rng);
  const std::string c = RandomBytes(DataType::kFloat32, m * n, rng);
  gemm::v1::MatmulRequest request;
  request.mutable_a_ref()->set_handle(Put(Dense({k, m}, DataType::kFloat32), a));
  request.mutable_b_ref()->set_handle(Put(Dense({k, n}, DataType::kFloat32), b));
  request.mutable_c_ref()->set_handle(Put(Dense({m, n}, DataType::kFloat32), c));
  request.set_transpose_a(true);
  request.set_beta(0.25f);
  request.mutable_keep_c();
  gemm::v1::MatmulResponse response;
  grpc::ClientContext context;
  const grpc::Status s = stub_->Matmul(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.device().rfind(device_ + " ", 0), 0u) << response.device();
  ASSERT_FALSE(response.c_ref().handle().empty());
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_a = true;
  p.beta = 0.25f;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), c.data(), nullptr});
  const std::string kept = Get(response.c_ref().handle());
  ASSERT_EQ(kept.size(), ref.size() * 4);
  EXPECT_LE(RelativeError(ref.data(), kept.data(), DataType::kFloat32, m * n), 1e-5);
}

TEST_F(GpuResidentTest, QuantizedWeightStaysPackedOnTheDeviceAndStacks) {
  std::mt19937_64 rng(4);
  const int64_t n = 1000, k = 1024;
  const std::string w = RandomBytes(DataType::kFloat32, n * k, rng);
  const Nvfp4Matrix q = *QuantizeNvfp4(reinterpret_cast<const float*>(w.data()), n, k);
  std::vector<float> deq(static_cast<size_t>(n * k));
  ASSERT_TRUE(DequantizeNvfp4(q, deq.data()).ok());
  gemm::v1::TensorHeader header;
  header.add_shape(n);
  header.add_shape(k);
  header.set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  header.set_tensor_scale(q.tensor_scale);
  const std::string handle =
      Put(header, std::string(q.packed.begin(), q.packed.end()),
          std::string(q.block_scales.begin(), q.block_scales.end()));
  constexpr int kCalls = 64;
  std::vector<gemm::v1::QuantizedMatmulRequest> requests(kCalls);
  std::vector<std::unique_ptr<Pending>> pending;
  for (int i = 0; i < kCalls; ++i) {
    const int64_t m = i % 5 == 0 ? 3 : 1;
    gemm::v1::Tensor* a = requests[i].mutable_a_dense();
    a->add_shape(m);
    a->add_shape(k);
    a->set_dtype(gemm::v1::DATA_TYPE_FLOAT16);
    a->set_data(RandomBytes(DataType::kFloat16, m * k, rng));
    requests[i].mutable_b_ref()->set_handle(handle);
    pending.push_back(std::make_unique<Pending>());
    Pending* p = pending.back().get();
    stub_->async()->QuantizedMatmul(&p->context, &requests[i], &p->response,
                                    [p](grpc::Status s) {
                                      p->status = std::move(s);
                                      p->done.Notify();
                                    });
  }
  uint32_t largest_batch = 0;
  for (int i = 0; i < kCalls; ++i) {
    pending[i]->done.WaitForNotification();
    ASSERT_TRUE(pending[i]->status.ok()) << pending[i]->status.error_message();
    const int64_t m = requests[i].a_dense().shape(0);
    std::vector<float> a(static_cast<size_t>(m * k));
    for (int64_t j = 0; j < m * k; ++j) {
      a[j] = static_cast<float>(
          LoadAsDouble(requests[i].a_dense().data().data(), DataType::kFloat16, j));
    }
    EXPECT_LE(ErrorOfABt(a.data(), deq.data(), m, n, k, pending[i]->response.c().data()), 1e-5)
        << "caller " << i << " on " << pending[i]->response.kernel();
    EXPECT_EQ(pending[i]->response.kernel().rfind("skinny_nvfp4", 0), 0u)
        << pending[i]->response.kernel();
    largest_batch = std::max(largest_batch, pending[i]->response.timing().batch_size());
  }
  EXPECT_GT(largest_batch, 1u);
}

TEST_F(GpuResidentTest, BothOperandsQuantizedByReference) {
  ExpectBothQuantizedByReference(300, 260, 512, 5, "qgemm_nvfp4");
}

// --quantized_layout=swap-ab: weights re-laid out on the GPU at the end of their upload.
// GetTensor returns the uploaded bytes; FP16 callers of up to 64 rows run on the swap-AB
// kernels; larger ones, BF16 ones and a re-laid out quantized A get the operands unpacked
// into the launch's workspace for the other kernels. Errors against FP64 on the
// dequantized operands, 1e-5.
class GpuResidentSwapAbTest : public GpuResidentTest {
 protected:
  void SetUp() override {
    quantized_layout_ = "swap-ab";
    GpuResidentTest::SetUp();
  }
};

TEST_F(GpuResidentSwapAbTest, ReLaidOutWeightsReadBackAndServeEveryCaller) {
  std::mt19937_64 rng(7);
  const int64_t n = 1040, k = 512;  // 5 bands, the last of 16 rows
  for (QuantFormat format : {QuantFormat::kNvfp4, QuantFormat::kInt8}) {
    SCOPED_TRACE(QuantFormatName(format));
    const std::string w = RandomBytes(DataType::kFloat32, n * k, rng);
    std::vector<float> deq(static_cast<size_t>(n * k));
    std::string data, scales;
    gemm::v1::TensorHeader header;
    header.add_shape(n);
    header.add_shape(k);
    if (format == QuantFormat::kNvfp4) {
      const Nvfp4Matrix q = *QuantizeNvfp4(reinterpret_cast<const float*>(w.data()), n, k);
      ASSERT_TRUE(DequantizeNvfp4(q, deq.data()).ok());
      data.assign(q.packed.begin(), q.packed.end());
      scales.assign(q.block_scales.begin(), q.block_scales.end());
      header.set_format(gemm::v1::QUANT_FORMAT_NVFP4);
      header.set_tensor_scale(q.tensor_scale);
    } else {
      const Int8Matrix q = *QuantizeInt8(reinterpret_cast<const float*>(w.data()), n, k);
      DequantizeInt8(q.values.data(), q.scales.data(), n, k, deq.data());
      data.assign(reinterpret_cast<const char*>(q.values.data()), q.values.size());
      scales.assign(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4);
      header.set_format(gemm::v1::QUANT_FORMAT_INT8);
    }
    const std::string handle = Put(header, data, scales);
    std::string got_scales;
    EXPECT_TRUE(Get(handle, &got_scales) == data) << "the data read back differs";
    EXPECT_TRUE(got_scales == scales) << "the scales read back differ";

    struct Call {
      int64_t m;
      DataType a_type;
      const char* kernel_prefix;
    };
    // Past 64 rows: the wgmma swap-AB kernel where it runs; else the square FP16 x NVFP4
    // kernel on the unpacked weight (and no kernel here takes FP16 against INT8).
    const bool wgmma = gpu::ResolveSwapAbPath(gpu::SwapAbPath::kWgmma).ok();
    for (const Call& call :
         {Call{1, DataType::kFloat16, "swapab_"}, Call{16, DataType::kFloat16, "swapab_"},
          Call{64, DataType::kFloat16, "swapab_"}, Call{4, DataType::kBFloat16, "skinny_"},
          Call{200, DataType::kFloat16, wgmma ? "swapab_" : "qgemm_f16xnvfp4"}}) {
      if (call.m > 64 && !wgmma && format == QuantFormat::kInt8) continue;
      SCOPED_TRACE(absl::StrCat(call.m, " rows of ", DataTypeName(call.a_type)));
      gemm::v1::QuantizedMatmulRequest request;
      gemm::v1::Tensor* a = request.mutable_a_dense();
      a->add_shape(call.m);
      a->add_shape(k);
      a->set_dtype(DataTypeToProto(call.a_type));
      a->set_data(RandomBytes(call.a_type, call.m * k, rng));
      request.mutable_b_ref()->set_handle(handle);
      gemm::v1::MatmulResponse response;
      grpc::ClientContext context;
      const grpc::Status st = stub_->QuantizedMatmul(&context, request, &response);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(response.kernel().rfind(call.kernel_prefix, 0), 0u) << response.kernel();
      std::vector<float> a_values(static_cast<size_t>(call.m * k));
      for (int64_t j = 0; j < call.m * k; ++j) {
        a_values[j] = static_cast<float>(LoadAsDouble(a->data().data(), call.a_type, j));
      }
      EXPECT_LE(ErrorOfABt(a_values.data(), deq.data(), call.m, n, k, response.c().data()), 1e-5)
          << response.kernel();
    }
  }
}

// Both operands by handle, both re-laid out: A unpacked for the swap-AB kernel for NVFP4
// A where wgmma runs, both unpacked for the square kernel elsewhere.
TEST_F(GpuResidentSwapAbTest, BothReLaidOutOperandsAreUnpackedWhereTheKernelReadsCanonical) {
  const bool wgmma = gpu::ResolveSwapAbPath(gpu::SwapAbPath::kWgmma).ok();
  ExpectBothQuantizedByReference(320, 256, 512, 8,
                                 wgmma ? "swapab_nvfp4xnvfp4_wgmma" : "qgemm_nvfp4");
}

}  // namespace
}  // namespace gemmd
