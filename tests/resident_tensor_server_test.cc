// Resident tensors through the whole server in-process (CPU backend), called with the
// generated gRPC stub as any client would: PutTensor / GetTensor / DeleteTensor /
// ListTensors, operands by handle against the FP64 reference, results kept resident,
// every error the API names (and that a refused upload stores nothing), TTL expiry, a
// delete while a job uses the tensor, a client that disconnects mid-upload, parallel
// parts, and shared-weight batching (stacked launches that give each caller its rows).
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/quant_formats.h"
#include "kernels/reference_gemm.h"
#include "server/devices/cpu/cpu_catalogue.h"
#include "server/devices/cpu/cpu_device.h"
#include "server/gemm_server.h"
#include "server/observability/log.h"
#include "server/scheduling/batcher.h"
#include "server/store/tensor_store.h"
#include "tests/resident_server_fixture.h"
#include "tests/server_fixture.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::AsFloats;
using ::gemmd::testing::ControlledCpu;
using ::gemmd::testing::Eventually;
using ::gemmd::testing::Floats;
using ::gemmd::testing::kAddressSanitizer;
using ::gemmd::testing::MaxRelError;
using ::gemmd::testing::RandomBytes;
using ::gemmd::testing::SetTensor;

int64_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      int64_t kb = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      if (absl::SimpleAtoi(digits, &kb)) return kb * 1024;
    }
  }
  return -1;
}

class ResidentTensorTest : public ::gemmd::testing::ResidentServerTest {};

TEST_F(ResidentTensorTest, MatmulByReferenceMatchesFp64) {
  Start(Config());
  const int64_t m = 7, k = 64, n = 48;
  const std::string a = RandomBytes(DataType::kFloat32, m * k, rng_);
  const std::string b = RandomBytes(DataType::kFloat32, n * k, rng_);  // stored [N, K]
  const std::string c = RandomBytes(DataType::kFloat32, m * n, rng_);
  absl::StatusOr<std::string> b_handle = PutDense({n, k}, b);
  ASSERT_TRUE(b_handle.ok()) << b_handle.status();
  absl::StatusOr<std::string> c_handle = PutDense({m, n}, c);
  ASSERT_TRUE(c_handle.ok()) << c_handle.status();
  EXPECT_EQ(Get(*b_handle), b);

  gemm::v1::MatmulRequest request;
  SetTensor(request.mutable_a(), {m, k}, DataType::kFloat32, a);
  request.mutable_b_ref()->set_handle(*b_handle);
  request.mutable_c_ref()->set_handle(*c_handle);
  request.set_transpose_b(true);
  request.set_alpha(0.5f);
  request.set_beta(-2.0f);
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(Call(request, &response).ok());
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_b = true;
  p.alpha = 0.5f;
  p.beta = -2.0f;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), c.data(), nullptr});
  EXPECT_LE(MaxRelError(ref, AsFloats(response.c().data())), 1e-5);
}

TEST_F(ResidentTensorTest, KeptResultsChainOnTheServer) {
  Start(Config());
  const int64_t m = 5, k = 32, n = 16;
  const std::string a = RandomBytes(DataType::kFloat32, m * k, rng_);
  const std::string b = RandomBytes(DataType::kFloat32, k * n, rng_);
  const std::string b2 = RandomBytes(DataType::kFloat32, n * 8, rng_);
  absl::StatusOr<std::string> a_handle = PutDense({m, k}, a);
  absl::StatusOr<std::string> b_handle = PutDense({k, n}, b);
  ASSERT_TRUE(a_handle.ok() && b_handle.ok());
  gemm::v1::MatmulRequest first;
  first.mutable_a_ref()->set_handle(*a_handle);
  first.mutable_b_ref()->set_handle(*b_handle);
  first.mutable_keep_c()->set_label("C1");
  gemm::v1::MatmulResponse kept;
  ASSERT_TRUE(Call(first, &kept).ok());
  ASSERT_FALSE(kept.c_ref().handle().empty());
  EXPECT_TRUE(kept.c().data().empty());
  EXPECT_EQ(kept.c().shape_size(), 2);
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  const std::vector<double> c1 = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  gemm::v1::TensorHeader header;
  const std::string c1_bytes = Get(kept.c_ref().handle(), &header);
  EXPECT_LE(MaxRelError(c1, AsFloats(c1_bytes)), 1e-5);
  EXPECT_EQ(header.label(), "C1");
  // C1 as the next A: C2 = C1 * B2, never leaving the server in between.
  gemm::v1::MatmulRequest second;
  second.mutable_a_ref()->set_handle(kept.c_ref().handle());
  SetTensor(second.mutable_b(), {n, 8}, DataType::kFloat32, b2);
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(Call(second, &response).ok());
  GemmProblem p2;
  p2.m = m;
  p2.n = 8;
  p2.k = n;
  const std::vector<double> c2 =
      ReferenceGemm(p2, {c1_bytes.data(), b2.data(), nullptr, nullptr});
  EXPECT_LE(MaxRelError(c2, AsFloats(response.c().data())), 1e-5);
}

TEST_F(ResidentTensorTest, QuantizedWeightByReferenceEqualsInline) {
  Start(Config());
  const int64_t m = 3, n = 40, k = 64;
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(m * k));
  std::normal_distribution<float> normal;
  for (float& v : w) v = normal(rng_);
  for (float& v : x) v = normal(rng_);
  absl::StatusOr<Nvfp4Matrix> q = QuantizeNvfp4(w.data(), n, k);
  ASSERT_TRUE(q.ok());
  const std::string codes(q->packed.begin(), q->packed.end());
  const std::string scales(q->block_scales.begin(), q->block_scales.end());
  gemm::v1::TensorChunk head;
  head.mutable_header()->add_shape(n);
  head.mutable_header()->add_shape(k);
  head.mutable_header()->set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  head.mutable_header()->set_tensor_scale(q->tensor_scale);
  gemm::v1::TensorChunk data_chunk, scales_chunk;
  data_chunk.set_data(codes);
  scales_chunk.set_scales(scales);
  absl::StatusOr<std::string> handle = PutChunks({head, data_chunk, scales_chunk});
  ASSERT_TRUE(handle.ok()) << handle.status();

  gemm::v1::QuantizedMatmulRequest inline_request;
  SetTensor(inline_request.mutable_a_dense(), {m, k}, DataType::kFloat32, Floats(x));
  gemm::v1::QuantizedTensor* b = inline_request.mutable_b();
  b->add_shape(n);
  b->add_shape(k);
  b->set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  b->set_data(codes);
  b->set_scales(scales);
  b->set_tensor_scale(q->tensor_scale);
  gemm::v1::QuantizedMatmulRequest by_ref = inline_request;
  by_ref.clear_b();
  by_ref.mutable_b_ref()->set_handle(*handle);
  gemm::v1::MatmulResponse inline_response, ref_response;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->QuantizedMatmul(&context, inline_request, &inline_response).ok());
  }
  {
    grpc::ClientContext context;
    const grpc::Status s = stub_->QuantizedMatmul(&context, by_ref, &ref_response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(ref_response.c().data(), inline_response.c().data());
}

TEST_F(ResidentTensorTest, RefusedUploadsSayWhyAndStoreNothing) {
  Start(Config(1 << 20));
  const std::string eight = std::string(32, '\0');  // 8 floats
  gemm::v1::TensorChunk data;
  data.set_data(eight);
  struct Case {
    std::string name;
    std::vector<gemm::v1::TensorChunk> chunks;
    absl::StatusCode code;
    std::string message;
  };
  gemm::v1::TensorChunk both = Header({2, 4}, gemm::v1::DATA_TYPE_FLOAT32);
  both.mutable_header()->set_format(gemm::v1::QUANT_FORMAT_INT8);
  gemm::v1::TensorChunk neither = Header({2, 4}, gemm::v1::DATA_TYPE_UNSPECIFIED);
  gemm::v1::TensorChunk int32 = Header({2, 4}, gemm::v1::DATA_TYPE_INT32);
  gemm::v1::TensorChunk huge;
  huge.set_data(std::string((4 << 20) + 1, '\0'));
  gemm::v1::TensorChunk nan_scales = Header({2, 32}, gemm::v1::DATA_TYPE_UNSPECIFIED);
  nan_scales.mutable_header()->set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  nan_scales.mutable_header()->set_tensor_scale(1.0f);
  nan_scales.set_data(std::string(32, '\0'));
  nan_scales.set_scales(std::string("\x38\x38\x38\xff", 4));
  gemm::v1::TensorChunk full = Header({1024, 1024}, gemm::v1::DATA_TYPE_FLOAT32);
  gemm::v1::TensorChunk huge_parts = Header({4096, 4}, gemm::v1::DATA_TYPE_FLOAT32);
  huge_parts.mutable_header()->set_parts(4294967295u);
  // A part's header that sets what the open already said was once accepted and ignored.
  gemm::v1::TensorChunk part_with_dtype;
  part_with_dtype.mutable_header()->mutable_part_of()->set_handle("t1-x-y");
  part_with_dtype.mutable_header()->set_dtype(gemm::v1::DATA_TYPE_FLOAT16);
  gemm::v1::TensorChunk part_with_label;
  part_with_label.mutable_header()->mutable_part_of()->set_handle("t1-x-y");
  part_with_label.mutable_header()->set_label("w");
  part_with_label.mutable_header()->set_ttl_s(5);
  gemm::v1::TensorChunk part_huge;
  part_huge.mutable_header()->mutable_part_of()->set_handle("t1-x-y");
  part_huge.mutable_header()->set_part(4294967295u);
  const std::vector<Case> cases = {
      {"no header", {data}, absl::StatusCode::kInvalidArgument, "first chunk has no header"},
      {"no chunks", {}, absl::StatusCode::kInvalidArgument, "ended before its first chunk"},
      {"header again",
       {Header({2, 4}, gemm::v1::DATA_TYPE_FLOAT32), Header({2, 4}, gemm::v1::DATA_TYPE_FLOAT32)},
       absl::StatusCode::kInvalidArgument,
       "chunk 2 has a header; only the first chunk carries one"},
      {"short", {Header({4, 4}, gemm::v1::DATA_TYPE_FLOAT32), data},
       absl::StatusCode::kInvalidArgument,
       "ended after 32 data bytes; FLOAT32 [4, 4] needs 64"},
      {"long", {Header({1, 4}, gemm::v1::DATA_TYPE_FLOAT32), data},
       absl::StatusCode::kInvalidArgument, "32 bytes sent; FLOAT32 [1, 4] has 16"},
      {"both kinds", {both}, absl::StatusCode::kInvalidArgument, "both dtype and format"},
      {"neither kind", {neither}, absl::StatusCode::kInvalidArgument, "neither dtype nor format"},
      {"int32", {int32}, absl::StatusCode::kInvalidArgument, "INT32 is not kept"},
      {"chunk over 4 MiB", {Header({1, 4}, gemm::v1::DATA_TYPE_FLOAT32), huge},
       absl::StatusCode::kInvalidArgument, "chunk 2 carries 4194305 bytes"},
      {"NaN E4M3", {nan_scales}, absl::StatusCode::kInvalidArgument, "a NaN in E4M3"},
      {"larger than the store",
       {full},
       absl::StatusCode::kResourceExhausted,
       "this tensor needs 4196352 bytes of the tensor store, more than its whole cap of "
       "1048576 (--tensor_store_bytes)"},
      {"2^32-1 parts",
       {huge_parts},
       absl::StatusCode::kInvalidArgument,
       "header.parts is 4294967295; expected 2 to min(1024, rows)"},
      {"a part's header with a dtype",
       {part_with_dtype},
       absl::StatusCode::kInvalidArgument,
       "a part's header carries part_of and part only"},
      {"a part's header with a label",
       {part_with_label},
       absl::StatusCode::kInvalidArgument,
       "a part's header carries part_of and part only"},
      {"part 2^32-1",
       {part_huge},
       absl::StatusCode::kInvalidArgument,
       "header.part is 4294967295; a tensor has at most 1024 parts"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> put = PutChunks(c.chunks);
    EXPECT_EQ(put.status().code(), c.code) << c.name << ": " << put.status();
    EXPECT_TRUE(absl::StrContains(put.status().message(), c.message))
        << c.name << ": " << put.status();
    ExpectEmptyStore();
  }
}

TEST_F(ResidentTensorTest, HandlesThatNameNothingAreNotFound) {
  Start(Config());
  absl::StatusOr<std::string> handle = PutDense({4, 4}, std::string(64, '\0'));
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(Delete(*handle).ok());
  for (const std::string& h : {*handle, std::string("nonsense"),
                               std::string("t1-0000000000000000-1234")}) {
    gemm::v1::MatmulRequest request;
    SetTensor(request.mutable_a(), {2, 4}, DataType::kFloat32, std::string(32, '\0'));
    request.mutable_b_ref()->set_handle(h);
    gemm::v1::MatmulResponse response;
    const grpc::Status s = Call(request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << h;
    EXPECT_TRUE(absl::StartsWith(s.error_message(), "b_ref: ")) << s.error_message();
    EXPECT_EQ(Delete(h).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(RefusedGet(h).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(ResidentTensorTest, ReferencedTensorsAreValidatedLikeInlineOnes) {
  Start(Config());
  absl::StatusOr<std::string> b = PutDense({8, 4}, std::string(128, '\0'));  // [K=8, N=4]
  ASSERT_TRUE(b.ok());
  gemm::v1::MatmulRequest request;
  SetTensor(request.mutable_a(), {2, 6}, DataType::kFloat32, std::string(48, '\0'));
  request.mutable_b_ref()->set_handle(*b);
  gemm::v1::MatmulResponse response;
  grpc::Status s = Call(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "inner dimensions differ")) << s.error_message();
  // Sent both ways.
  SetTensor(request.mutable_b(), {6, 4}, DataType::kFloat32, std::string(96, '\0'));
  s = Call(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "b and b_ref are both set")) << s.error_message();
  // A dense tensor is no quantized weight.
  gemm::v1::QuantizedMatmulRequest quantized;
  SetTensor(quantized.mutable_a_dense(), {2, 8}, DataType::kFloat32, std::string(64, '\0'));
  quantized.mutable_b_ref()->set_handle(*b);
  grpc::ClientContext context;
  s = stub_->QuantizedMatmul(&context, quantized, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "b_ref names a FLOAT32 [8, 4] tensor"))
      << s.error_message();
}

TEST_F(ResidentTensorTest, ExpiresAfterItsTtlAndIsCounted) {
  Start(Config());
  absl::StatusOr<std::string> handle = PutDense({2, 2}, std::string(16, '\0'), 1000, 1);
  ASSERT_TRUE(handle.ok());
  ASSERT_EQ(List().tensors_size(), 1);
  EXPECT_GT(List().tensors(0).expires_unix_ms(), 0);
  EXPECT_TRUE(Eventually([&] { return List().tensors_size() == 0; }, absl::Seconds(10)));
  EXPECT_EQ(Delete(*handle).error_code(), grpc::StatusCode::NOT_FOUND);
  double expired = -1;
  for (const auto& family : server_->metrics().registry()->Collect()) {
    if (family.name == "gemm_tensor_store_expired_total") expired = family.metric[0].counter.value;
  }
  EXPECT_EQ(expired, 1);
  ExpectEmptyStore();
}

TEST_F(ResidentTensorTest, DeleteWhileAJobUsesTheTensorWaitsForIt) {
  auto device = std::make_unique<ControlledCpu>();
  ControlledCpu* gated = device.get();
  Backend backend = OpenCpuBackend();
  backend.devices.clear();
  backend.devices.push_back(std::move(device));
  Start(Config(), std::move(backend));
  const int64_t m = 3, k = 16, n = 8;
  const std::string a = RandomBytes(DataType::kFloat32, m * k, rng_);
  const std::string b = RandomBytes(DataType::kFloat32, k * n, rng_);
  absl::StatusOr<std::string> handle = PutDense({k, n}, b);
  ASSERT_TRUE(handle.ok());
  gated->Close();
  ::gemmd::testing::AsyncCall call;
  SetTensor(call.request.mutable_a(), {m, k}, DataType::kFloat32, a);
  call.request.mutable_b_ref()->set_handle(*handle);
  call.Start(stub_.get());
  ASSERT_TRUE(Eventually([&] { return !gated->launches().empty(); }));
  ASSERT_TRUE(Delete(*handle).ok());
  EXPECT_EQ(List().tensors_size(), 0);
  // The running job still holds it.
  EXPECT_EQ(server_->store()->used_bytes(), server_->store()->ChargeFor(k * n * 4, 0));
  gated->Open();
  call.done.WaitForNotification();
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  EXPECT_LE(MaxRelError(ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr}),
                        AsFloats(call.response.c().data())),
            1e-5);
  ExpectEmptyStore();
}

TEST_F(ResidentTensorTest, ADisconnectMidUploadLeavesNothing) {
  Start(Config(int64_t{1} << 30));
  const int64_t rss_before = RssBytes();
  {
    grpc::ClientContext context;
    gemm::v1::PutTensorResponse handle;
    auto writer = stub_->PutTensor(&context, &handle);
    ASSERT_TRUE(writer->Write(Header({8192, 8192}, gemm::v1::DATA_TYPE_FLOAT32)));  // 256 MiB
    gemm::v1::TensorChunk chunk;
    chunk.set_data(std::string(4 << 20, '\x01'));
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(writer->Write(chunk));  // 128 MiB of it
    ASSERT_TRUE(Eventually([&] { return server_->store()->used_bytes() > 0; }));
    context.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  ExpectEmptyStore();
  // The tensor's memory went back to the system (a little slack for gRPC's buffers).
  if (kAddressSanitizer) {
    std::cout << "[ NOTE     ] RSS not checked under AddressSanitizer (its quarantine keeps "
                 "freed memory)\n";
  } else {
    EXPECT_TRUE(Eventually([&] { return RssBytes() < rss_before + (int64_t{64} << 20); }))
        << "RSS before " << rss_before << ", after " << RssBytes();
  }
  double gauge = -1;
  for (const auto& family : server_->metrics().registry()->Collect()) {
    if (family.name == "gemm_tensor_store_bytes") gauge = family.metric[0].gauge.value;
  }
  EXPECT_EQ(gauge, 0);
}

TEST_F(ResidentTensorTest, ParallelPartsMakeOneTensor) {
  Start(Config());
  const int64_t rows = 101, cols = 33;
  const std::string bytes = RandomBytes(DataType::kFloat32, rows * cols, rng_);
  gemm::v1::TensorChunk open = Header({rows, cols}, gemm::v1::DATA_TYPE_FLOAT32);
  open.mutable_header()->set_parts(3);
  absl::StatusOr<std::string> handle = PutChunks({open});
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_EQ(List().tensors_size(), 1);
  EXPECT_FALSE(List().tensors(0).complete());
  std::vector<std::thread> parts;
  std::vector<absl::Status> results(3);
  for (int i = 0; i < 3; ++i) {
    parts.emplace_back([&, i] {
      const int64_t first = rows * i / 3, last = rows * (i + 1) / 3;
      gemm::v1::TensorChunk head;
      head.mutable_header()->mutable_part_of()->set_handle(*handle);
      head.mutable_header()->set_part(i);
      gemm::v1::TensorChunk data;
      data.set_data(bytes.substr(first * cols * 4, (last - first) * cols * 4));
      results[i] = PutChunks({head, data}).status();
    });
  }
  for (std::thread& t : parts) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(List().tensors(0).complete());
  EXPECT_EQ(Get(*handle), bytes);
}

// The CPU's FP32 kernel under another name, which the catalogue below chooses for tall
// problems: a stack's kernel then differs from a lone call's.
class TallKernel final : public CpuKernel {
 public:
  std::string_view name() const override { return "test_sgemm_tall"; }
  KernelInput input() const override { return KernelInput::kDense; }
  Precision precision() const override { return Precision::kFp32; }
  absl::Status Check(const GemmProblem& p) const override { return sgemm().Check(p); }
  absl::Status Check(const QuantizedOperands& q) const override { return sgemm().Check(q); }
  absl::Status Run(const GemmProblem& p, const GemmOperands& host) const override {
    return sgemm().Run(p, host);
  }
  absl::Status Run(const QuantizedOperands& q, float* c) const override {
    return sgemm().Run(q, c);
  }

 private:
  static const CpuKernel& sgemm() { return *FindCpuKernel(kCpuSgemmKernel); }
};

class TallRowsCatalogue final : public CpuCatalogue {
 public:
  std::vector<KernelDescription> Kernels() const override {
    std::vector<KernelDescription> kernels = CpuCatalogue::Kernels();
    kernels.insert(kernels.begin(), {"test_sgemm_tall", KernelInput::kDense, Precision::kFp32, ""});
    return kernels;
  }
  absl::StatusOr<const Kernel*> Select(const GemmProblem& problem,
                                       std::string_view forced) const override {
    static const TallKernel tall;
    if (forced == tall.name() ||
        (forced.empty() && problem.precision == Precision::kFp32 && problem.m >= 8)) {
      return &tall;
    }
    return CpuCatalogue::Select(problem, forced);
  }
};

// Callers whose A rows stack onto one resident B: one launch, each caller its own rows,
// on the kernel chosen for the stack's M, which every response names (not the kernel
// each call would have had alone).
TEST_F(ResidentTensorTest, CallsAgainstOneWeightStackIntoOneLaunch) {
  auto device = std::make_unique<ControlledCpu>();
  ControlledCpu* gated = device.get();
  Backend backend = OpenCpuBackend();
  backend.catalogue = std::make_unique<TallRowsCatalogue>();
  backend.devices.clear();
  backend.devices.push_back(std::move(device));
  ServerConfig config = Config();
  config.max_queue_delay = absl::Seconds(1);  // a batch forms when the device frees
  Start(config, std::move(backend));
  const int64_t k = 32, n = 24;
  const std::string b = RandomBytes(DataType::kFloat32, k * n, rng_);
  absl::StatusOr<std::string> handle = PutDense({k, n}, b);
  ASSERT_TRUE(handle.ok());
  // A first call holds the device; five more, each its own M, wait and then go as one.
  const std::vector<int64_t> ms = {1, 1, 3, 2, 5, 1};
  std::vector<std::unique_ptr<::gemmd::testing::AsyncCall>> calls;
  StartBehindTheFirst(gated, ms.size(), [&](size_t i) {
    auto call = std::make_unique<::gemmd::testing::AsyncCall>();
    SetTensor(call->request.mutable_a(), {ms[i], k}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, ms[i] * k, rng_));
    call->request.mutable_b_ref()->set_handle(*handle);
    call->Start(stub_.get());
    calls.push_back(std::move(call));
  });
  for (size_t i = 0; i < ms.size(); ++i) {
    calls[i]->done.WaitForNotification();
    ASSERT_TRUE(calls[i]->status.ok()) << calls[i]->status.error_message();
    GemmProblem p;
    p.m = ms[i];
    p.n = n;
    p.k = k;
    const std::string& a = calls[i]->request.a().data();
    EXPECT_LE(MaxRelError(ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr}),
                          AsFloats(calls[i]->response.c().data())),
              1e-5)
        << "caller " << i;
    EXPECT_EQ(calls[i]->response.timing().batch_size(), i == 0 ? 1u : 5u);
    EXPECT_EQ(calls[i]->response.kernel(), i == 0 ? kCpuSgemmKernel : "test_sgemm_tall")
        << "caller " << i;
  }
  const std::vector<ControlledCpu::Launch> launches = gated->launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].items, 5);
  EXPECT_TRUE(launches[1].stacked);
  EXPECT_EQ(launches[1].m, 1 + 3 + 2 + 5 + 1);  // every caller's rows in one GEMM
}

TEST_F(ResidentTensorTest, WeightOnlyCallsAgainstOneQuantizedWeightStack) {
  auto device = std::make_unique<ControlledCpu>();
  ControlledCpu* gated = device.get();
  Backend backend = OpenCpuBackend();
  backend.devices.clear();
  backend.devices.push_back(std::move(device));
  ServerConfig config = Config();
  config.max_queue_delay = absl::Seconds(1);
  Start(config, std::move(backend));
  const int64_t n = 24, k = 32;
  std::vector<float> w(static_cast<size_t>(n * k));
  std::normal_distribution<float> normal;
  for (float& v : w) v = normal(rng_);
  const Nvfp4Matrix q = *QuantizeNvfp4(w.data(), n, k);
  gemm::v1::TensorChunk head;
  head.mutable_header()->add_shape(n);
  head.mutable_header()->add_shape(k);
  head.mutable_header()->set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  head.mutable_header()->set_tensor_scale(q.tensor_scale);
  head.set_data(std::string(q.packed.begin(), q.packed.end()));
  head.set_scales(std::string(q.block_scales.begin(), q.block_scales.end()));
  absl::StatusOr<std::string> handle = PutChunks({head});
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<float> deq(static_cast<size_t>(n * k));
  ASSERT_TRUE(DequantizeNvfp4(q, deq.data()).ok());
  const std::vector<int64_t> ms = {1, 1, 2, 1, 3};
  struct Quantized {
    grpc::ClientContext context;
    gemm::v1::QuantizedMatmulRequest request;
    gemm::v1::MatmulResponse response;
    grpc::Status status;
    absl::Notification done;
  };
  std::vector<std::unique_ptr<Quantized>> calls;
  StartBehindTheFirst(gated, ms.size(), [&](size_t i) {
    auto call = std::make_unique<Quantized>();
    SetTensor(call->request.mutable_a_dense(), {ms[i], k}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, ms[i] * k, rng_));
    call->request.mutable_b_ref()->set_handle(*handle);
    Quantized* c = call.get();
    stub_->async()->QuantizedMatmul(&c->context, &c->request, &c->response,
                                    [c](grpc::Status st) {
                                      c->status = std::move(st);
                                      c->done.Notify();
                                    });
    calls.push_back(std::move(call));
  });
  for (size_t i = 0; i < ms.size(); ++i) {
    calls[i]->done.WaitForNotification();
    ASSERT_TRUE(calls[i]->status.ok()) << calls[i]->status.error_message();
    GemmProblem p;
    p.m = ms[i];
    p.n = n;
    p.k = k;
    p.transpose_b = true;
    const std::string& a = calls[i]->request.a_dense().data();
    EXPECT_LE(MaxRelError(ReferenceGemm(p, {a.data(), deq.data(), nullptr, nullptr}),
                          AsFloats(calls[i]->response.c().data())),
              1e-5);
    EXPECT_EQ(calls[i]->response.timing().batch_size(), i == 0 ? 1u : 4u);
  }
  const std::vector<ControlledCpu::Launch> launches = gated->launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].items, 4);
  EXPECT_TRUE(launches[1].stacked);
}

TEST_F(ResidentTensorTest, HandleOperandsWithBatchingOff) {
  ServerConfig config = Config();
  config.max_batch_size = 1;
  Start(config);
  const int64_t k = 16, n = 8;
  const std::string b = RandomBytes(DataType::kFloat32, k * n, rng_);
  absl::StatusOr<std::string> handle = PutDense({k, n}, b);
  ASSERT_TRUE(handle.ok());
  std::vector<std::unique_ptr<::gemmd::testing::AsyncCall>> calls;
  for (int i = 0; i < 4; ++i) {
    auto call = std::make_unique<::gemmd::testing::AsyncCall>();
    SetTensor(call->request.mutable_a(), {i + 1, k}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, (i + 1) * k, rng_));
    call->request.mutable_b_ref()->set_handle(*handle);
    call->Start(stub_.get());
    calls.push_back(std::move(call));
  }
  for (int i = 0; i < 4; ++i) {
    calls[i]->done.WaitForNotification();
    ASSERT_TRUE(calls[i]->status.ok());
    EXPECT_EQ(calls[i]->response.timing().batch_size(), 1u);
    GemmProblem p;
    p.m = i + 1;
    p.n = n;
    p.k = k;
    const std::string& a = calls[i]->request.a().data();
    EXPECT_LE(MaxRelError(ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr}),
                          AsFloats(calls[i]->response.c().data())),
              1e-5);
  }
}

TEST_F(ResidentTensorTest, ServerInfoShowsTheStore) {
  Start(Config(12345678));
  grpc::ClientContext context;
  gemm::v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.limits().tensor_store_bytes(), 12345678);
  EXPECT_EQ(info.limits().max_tensor_chunk_bytes(), 4 << 20);
  EXPECT_EQ(info.instance(), server_->store()->instance());
  EXPECT_EQ(info.instance().size(), 16u);
}

TEST_F(ResidentTensorTest, WithoutAStoreReferencesAreRefused) {
  Start(Config(0));
  EXPECT_EQ(server_->store(), nullptr);
  absl::StatusOr<std::string> put = PutDense({2, 2}, std::string(16, '\0'));
  EXPECT_EQ(put.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(put.status().message(), "--tensor_store_bytes=0"));
}

}  // namespace
}  // namespace gemmd
