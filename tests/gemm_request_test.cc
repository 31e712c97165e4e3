// Request preparation phase by phase (server/rpc/request_phases.h), and PrepareRequest
// and SetResultDestination, which compose them.
#include "server/rpc/request_phases.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/quant_formats.h"
#include "server/devices/cpu/cpu_catalogue.h"
#include "server/observability/log.h"
#include "server/rpc/gemm_request.h"
#include "tests/fake_device.h"

namespace gemmd {
namespace {

using ::gemmd::testing::FakeDevice;

std::string FloatBytes(std::vector<float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

void SetDense(gemm::v1::Tensor* t, std::vector<int64_t> shape, const std::string& data) {
  for (int64_t d : shape) t->add_shape(d);
  t->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  t->set_data(data);
}

// The message's bytes as gRPC would hand them over, in `pieces` slices of about equal size.
grpc::ByteBuffer Bytes(const google::protobuf::Message& message, int pieces = 1) {
  const std::string bytes = message.SerializeAsString();
  std::vector<grpc::Slice> slices;
  const size_t step = (bytes.size() + pieces - 1) / pieces;
  for (size_t at = 0; at < bytes.size(); at += step) {
    slices.emplace_back(bytes.substr(at, step));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

class GemmRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogEnabled(false);
    TensorStoreOptions options;
    options.cap_bytes = 1 << 20;
    options.sweep_interval = absl::Hours(1);
    store_ = std::make_unique<TensorStore>(options, std::vector<Device*>{&device_}, nullptr);
    context_.limits = {int64_t{64} << 20, int64_t{1} << 24};
    context_.catalogue = &catalogue_;
    context_.memory = memory_.get();
    context_.store = store_.get();
  }
  void TearDown() override { SetLogEnabled(true); }

  std::string PutDense(std::vector<int64_t> shape, const std::string& bytes) {
    TensorSpec spec;
    spec.shape = std::move(shape);
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
        store_->Begin(spec, absl::ZeroDuration(), "test");
    EXPECT_TRUE(upload.ok()) << upload.status();
    EXPECT_TRUE((*upload)->Append(bytes, {}).ok());
    absl::StatusOr<std::string> handle = (*upload)->Finish();
    EXPECT_TRUE(handle.ok()) << handle.status();
    return *handle;
  }

  FakeDevice device_;
  CpuCatalogue catalogue_;
  std::shared_ptr<HostMemory> memory_ = HostMemory::Create(int64_t{1} << 30, 0);
  std::unique_ptr<TensorStore> store_;
  GemmRequestContext context_;
};

TEST_F(GemmRequestTest, TakeReceivedHoldsTheSlicesAndReservesTheirBytes) {
  gemm::v1::MatmulRequest request;
  SetDense(request.mutable_a(), {2, 2}, FloatBytes({1, 2, 3, 4}));
  grpc::ByteBuffer bytes = Bytes(request, 3);
  const size_t size = bytes.Length();
  absl::StatusOr<Received> received = TakeReceived(context_, &bytes);
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(bytes.Length(), 0u);  // taken
  EXPECT_GT(received->slices.size(), 1u);  // as they came: no copy joined them
  EXPECT_EQ(received->runs.size(), size);
  EXPECT_EQ(memory_->reserved_bytes(), static_cast<int64_t>(size));

  context_.limits.max_message_bytes = 10;
  grpc::ByteBuffer too_big = Bytes(request);
  EXPECT_EQ(TakeReceived(context_, &too_big).status(),
            absl::ResourceExhaustedError(absl::StrCat(
                "the request is ", size, " bytes; this server accepts at most 10 "
                "(--max_message_bytes)")));
}

TEST_F(GemmRequestTest, BindPinsResidentTensorsAndSaysWhereTheyAre) {
  const std::string b = FloatBytes({1, 2, 3, 4, 5, 6});
  gemm::v1::MatmulRequest head;
  head.mutable_b_ref()->set_handle(PutDense({2, 3}, b));
  absl::StatusOr<Bound> bound = BindMatmul(store_.get(), "", &head);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_NE(bound->refs.b, nullptr);
  EXPECT_TRUE(bound->residency.b);
  EXPECT_FALSE(bound->residency.a);
  EXPECT_EQ(bound->device, 0);
  EXPECT_EQ(bound->shared_b, bound->refs.b->memory);
  EXPECT_EQ(head.b().shape_size(), 2);  // the header stands in for the tensor
  EXPECT_EQ(std::memcmp(DataOf(*bound->refs.b).data(), b.data(), b.size()), 0);

  gemm::v1::MatmulRequest inline_only;
  SetDense(inline_only.mutable_a(), {1, 1}, FloatBytes({1}));
  absl::StatusOr<Bound> none = BindMatmul(store_.get(), "", &inline_only);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->device, -1);
  EXPECT_EQ(none->shared_b, nullptr);

  gemm::v1::MatmulRequest unknown;
  unknown.mutable_b_ref()->set_handle("nope");
  EXPECT_EQ(BindMatmul(store_.get(), "", &unknown).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(BindMatmul(nullptr, "", &unknown).status(),
            absl::FailedPreconditionError("b_ref is set but this server keeps no resident "
                                          "tensors (--tensor_store_bytes=0)"));
}

TEST_F(GemmRequestTest, ValidateSeesLocatedSizesBeforeAnythingIsPlaced) {
  gemm::v1::MatmulRequest request;
  SetDense(request.mutable_a(), {2, 3}, FloatBytes({1, 2, 3, 4, 5, 6}));
  const std::string b = FloatBytes({1, 0, 0, 1, 1, 1});
  request.mutable_b_ref()->set_handle(PutDense({3, 2}, b));
  wire::MatmulRequestWire located;
  ASSERT_TRUE(wire::ParseMatmulRequest(wire::ByteRuns(request.SerializeAsString()), &located).ok());
  absl::StatusOr<Bound> bound = BindMatmul(store_.get(), "", &located.head);
  ASSERT_TRUE(bound.ok());
  const MatmulPayloads payloads = LocatedPayloads(located, bound->refs);
  EXPECT_EQ(payloads.a.data(), nullptr);  // inline: its size alone
  EXPECT_EQ(payloads.a.size(), 24u);
  EXPECT_EQ(payloads.b.data(), DataOf(*bound->refs.b).data());  // resident: where it is
  absl::StatusOr<ValidatedMatmul> v =
      ValidateMatmul(located.head, payloads, context_.limits, bound->residency);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.m, 2);
  EXPECT_EQ(v->problem.n, 2);
  EXPECT_EQ(v->problem.k, 3);
}

TEST_F(GemmRequestTest, PlaceUsesPayloadsInPlaceOrCopiesThemAndHandsResidentOnesToTheDevice) {
  gemm::v1::MatmulRequest request;
  SetDense(request.mutable_a(), {2, 2}, FloatBytes({1, 2, 3, 4}));
  SetDense(request.mutable_c(), {2, 2}, FloatBytes({9, 9, 9, 9}));  // sent, beta = 0: unread
  request.mutable_b_ref()->set_handle(PutDense({2, 2}, FloatBytes({1, 0, 0, 1})));
  GemmProblem problem;
  problem.m = problem.n = problem.k = 2;
  for (const int pieces : {1, 4}) {
    grpc::ByteBuffer bytes = Bytes(request, pieces);
    absl::StatusOr<Received> received = TakeReceived(context_, &bytes);
    ASSERT_TRUE(received.ok());
    wire::MatmulRequestWire located;
    ASSERT_TRUE(wire::ParseMatmulRequest(received->runs, &located).ok());
    absl::StatusOr<Bound> bound = BindMatmul(store_.get(), "", &located.head);
    ASSERT_TRUE(bound.ok());
    absl::StatusOr<PlacedMatmul> placed = PlaceMatmul(context_, located, bound->refs, problem);
    ASSERT_TRUE(placed.ok()) << placed.status();
    ASSERT_NE(placed->host.a, nullptr);
    EXPECT_EQ(static_cast<const float*>(placed->host.a)[3], 4.0f);
    EXPECT_EQ(placed->host.b, DataOf(*bound->refs.b).data());  // host memory here
    EXPECT_EQ(placed->host.c_in, nullptr);
    EXPECT_EQ(placed->host.c_out, nullptr);  // set once, later
    EXPECT_EQ(placed->on_device.b, nullptr);
    if (pieces > 1) {
      EXPECT_NE(placed->copied, nullptr);  // split across slices: copied (this device
                                           // does not gather pieces)
    }
  }

  // A device whose resident memory is its own reads a resident B there.
  context_.resident_in_host_memory = false;
  grpc::ByteBuffer bytes = Bytes(request);
  absl::StatusOr<Received> received = TakeReceived(context_, &bytes);
  wire::MatmulRequestWire located;
  ASSERT_TRUE(wire::ParseMatmulRequest(received->runs, &located).ok());
  absl::StatusOr<Bound> bound = BindMatmul(store_.get(), "", &located.head);
  absl::StatusOr<PlacedMatmul> placed = PlaceMatmul(context_, located, bound->refs, problem);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->host.b, nullptr);
  EXPECT_EQ(placed->on_device.b, DataOf(*bound->refs.b).data());
}

TEST_F(GemmRequestTest, AQuantizedMatmulGetsThePackedOperandsOrFp32OnesByItsPath) {
  const int64_t m = 2, n = 3, k = 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> a(m * k), b(n * k);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  const Int8Matrix qa = *QuantizeInt8(a.data(), m, k);
  const Int8Matrix qb = *QuantizeInt8(b.data(), n, k);
  gemm::v1::QuantizedMatmulRequest head;
  auto set = [k](gemm::v1::QuantizedTensor* t, int64_t rows, const Int8Matrix& q) {
    t->add_shape(rows);
    t->add_shape(k);
    t->set_format(gemm::v1::QUANT_FORMAT_INT8);
    t->set_data(std::string(q.values.begin(), q.values.end()));
    t->set_scales(std::string(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4));
  };
  set(head.mutable_a(), m, qa);
  set(head.mutable_b(), n, qb);
  absl::StatusOr<ValidatedQuantized> v = ValidateQuantizedMatmul(head, context_.limits);
  ASSERT_TRUE(v.ok()) << v.status();
  const wire::QuantizedPayloads payloads = PayloadsOf(head);
  TensorRefs none;

  absl::StatusOr<QuantizedInputs> packed =
      QuantizedInputsFor(context_, head, *v, payloads, PackedOperands(head, *v, payloads),
                         none, KernelPath::kPacked);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->dequantized, nullptr);
  ASSERT_TRUE(packed->packed.a.has_value());
  EXPECT_EQ(packed->packed.b.data.data(), payloads.b_data.data());  // read as sent

  absl::StatusOr<QuantizedInputs> host =
      QuantizedInputsFor(context_, head, *v, payloads, PackedOperands(head, *v, payloads),
                         none, KernelPath::kHost);
  ASSERT_TRUE(host.ok());
  std::vector<float> want_a(m * k), want_b(n * k);
  DequantizeInt8(qa, want_a.data());
  DequantizeInt8(qb, want_b.data());
  ASSERT_NE(host->host.a, nullptr);
  EXPECT_EQ(std::memcmp(host->host.a, want_a.data(), want_a.size() * 4), 0);
  EXPECT_EQ(std::memcmp(host->host.b, want_b.data(), want_b.size() * 4), 0);
  EXPECT_EQ(host->dequantized_reservation.bytes(), (m + n) * k * 4);

  absl::StatusOr<QuantizedInputs> dense_a =
      QuantizedInputsFor(context_, head, *v, payloads, PackedOperands(head, *v, payloads),
                         none, KernelPath::kDenseA);
  ASSERT_TRUE(dense_a.ok());
  EXPECT_FALSE(dense_a->packed.a.has_value());
  EXPECT_EQ(dense_a->packed.a_dense.size(), static_cast<size_t>(m * k * 4));
  EXPECT_EQ(std::memcmp(dense_a->packed.a_dense.data(), want_a.data(), want_a.size() * 4), 0);
}

TEST_F(GemmRequestTest, PrepareValidatesBeforeCopyingAndSetsCOnce) {
  // A request whose A is split across slices (so it would be copied) and whose shapes do
  // not fit: refused as INVALID_ARGUMENT before any copy, with memory room for the
  // received bytes only.
  gemm::v1::MatmulRequest bad;
  SetDense(bad.mutable_a(), {64, 64}, std::string(64 * 64 * 4, '\0'));
  SetDense(bad.mutable_b(), {32, 8}, std::string(32 * 8 * 4, '\0'));
  grpc::ByteBuffer bytes = Bytes(bad, 8);
  auto tight = HostMemory::Create(static_cast<int64_t>(bytes.Length()) + 1024, 0);
  GemmRequestContext context = context_;
  context.memory = tight.get();
  GemmRequest refused;
  PrecisionLabel label = PrecisionLabel::None();
  const absl::Status status = PrepareRequest(context, RpcMethod::kMatmul, &bytes, &refused, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "inner dimensions differ")) << status;

  // A good one that keeps C resident: C goes to the kept tensor, set once, and nothing
  // goes back in the response.
  gemm::v1::MatmulRequest keep;
  SetDense(keep.mutable_a(), {1, 2}, FloatBytes({1, 2}));
  SetDense(keep.mutable_b(), {2, 1}, FloatBytes({3, 4}));
  keep.mutable_keep_c()->set_ttl_s(60);
  grpc::ByteBuffer keep_bytes = Bytes(keep);
  GemmRequest kept;
  ASSERT_TRUE(PrepareRequest(context_, RpcMethod::kMatmul, &keep_bytes, &kept, &label).ok());
  ASSERT_NE(kept.kept_c, nullptr);
  EXPECT_EQ(kept.output_bytes, 0);
  EXPECT_EQ(kept.device, kept.kept_c->device_index);
  EXPECT_EQ(kept.kernel->name(), "cpu_sgemm_openblas");
  EXPECT_EQ(kept.operands.c_out, nullptr);
  float response[1];
  SetResultDestination(context_, response, &kept);
  EXPECT_EQ(kept.operands.c_out, kept.kept_c->memory);  // not the response

  gemm::v1::MatmulRequest inline_c = keep;
  inline_c.clear_keep_c();
  grpc::ByteBuffer plain_bytes = Bytes(inline_c);
  GemmRequest plain;
  ASSERT_TRUE(PrepareRequest(context_, RpcMethod::kMatmul, &plain_bytes, &plain, &label).ok());
  EXPECT_EQ(plain.output_bytes, 4);
  SetResultDestination(context_, response, &plain);
  EXPECT_EQ(plain.operands.c_out, response);
}

TEST_F(GemmRequestTest, AKeptCNeedsAStoreAndLandsOnTheOperandsDevice) {
  gemm::v1::ResidentResult keep;
  keep.set_ttl_s(10);
  absl::StatusOr<std::shared_ptr<StoredTensor>> kept =
      AllocateKeptC(context_, keep, {2, 3}, DataType::kFloat32, 0, "");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ((*kept)->device_index, 0);
  EXPECT_EQ((*kept)->spec.shape, (std::vector<int64_t>{2, 3}));
  GemmRequestContext no_store = context_;
  no_store.store = nullptr;
  EXPECT_EQ(AllocateKeptC(no_store, keep, {2, 3}, DataType::kFloat32, -1, "").status(),
            absl::FailedPreconditionError(
                "keep_c is set but this server keeps no resident tensors "
                "(--tensor_store_bytes=0)"));
}

}  // namespace
}  // namespace gemmd
