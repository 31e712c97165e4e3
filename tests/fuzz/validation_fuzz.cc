// libFuzzer target: Matmul and QuantizedMatmul request validation (server/rpc/
// matmul_validation.h, quantized_validation.h) on whatever the wire parser accepts, as the
// server runs it. Beyond "no crash": a request that validates is one the backends can run
// without reading past its operands, which this target checks by running it. Each
// payload is copied into an allocation of exactly its size, so AddressSanitizer sees
// any read past it; an accepted Matmul small enough goes through the FP64 reference
// GEMM, and an accepted QuantizedMatmul is dequantized in full. Sizes the validator
// promises (output and input bytes, the limits) are checked against the request.
//
// Input: one byte of flags, then the message. Flag bit 0: QuantizedMatmul (else
// Matmul); bits 1-4: which operands count as resident (A, B, C, C kept), as a request
// naming stored tensors would have them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "google/protobuf/stubs/common.h"
#include "kernels/reference_gemm.h"
#include "proto/wire/gemm_wire.h"
#include "server/rpc/matmul_validation.h"
#include "server/rpc/quantized_validation.h"

namespace {

using gemmd::wire::ByteRuns;

// Small limits, so that everything accepted can be run here.
constexpr int64_t kMaxElements = int64_t{1} << 16;
constexpr int64_t kMaxMessageBytes = int64_t{1} << 20;
// Reference GEMMs up to this many multiply-adds (the rest are checked for sizes only).
constexpr double kMaxReferenceFlops = 2.0 * (1 << 18);

void Check(bool ok) {
  if (!ok) std::abort();
}

// A payload in memory of exactly its size.
class ExactCopy {
 public:
  explicit ExactCopy(const ByteRuns& runs)
      : size_(runs.size()), bytes_(new char[size_ == 0 ? 1 : size_]) {
    runs.CopyTo(bytes_.get());
  }
  absl::string_view view() const { return absl::string_view(bytes_.get(), size_); }

 private:
  size_t size_;
  std::unique_ptr<char[]> bytes_;
};

int64_t ElementsOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void FuzzMatmul(const ByteRuns& runs, uint8_t flags) {
  gemmd::wire::MatmulRequestWire parsed;
  if (!gemmd::wire::ParseMatmulRequest(runs, &parsed).ok()) return;
  const ExactCopy a(parsed.a_data), b(parsed.b_data), c(parsed.c_data);
  const gemmd::MatmulPayloads payloads{a.view(), b.view(), c.view()};
  gemmd::MatmulResidency residency;
  residency.a = flags & 2;
  residency.b = flags & 4;
  residency.c = flags & 8;
  residency.keep_c = flags & 16;
  const absl::StatusOr<gemmd::ValidatedMatmul> v = gemmd::ValidateMatmul(
      parsed.head, payloads, {kMaxMessageBytes, kMaxElements}, residency);
  if (!v.ok()) {
    Check(!v.status().message().empty());
    return;
  }
  const gemmd::GemmProblem& p = v->problem;
  Check(p.batch >= 1 && p.m >= 1 && p.n >= 1 && p.k >= 1);
  // Every operand read lies inside its payload.
  auto fits = [](int64_t elements, gemmd::DataType type, absl::string_view bytes) {
    return elements * static_cast<int64_t>(gemmd::DataTypeSize(type)) <=
           static_cast<int64_t>(bytes.size());
  };
  Check(v->operands.a == a.view().data() && fits(p.ElementsA(), p.a_type, a.view()));
  Check(v->operands.b == b.view().data() && fits(p.ElementsB(), p.b_type, b.view()));
  if (p.beta != 0.0f) Check(v->operands.c_in != nullptr && fits(p.ElementsCIn(), p.c_type, c.view()));
  // The result: its shape, its bytes, and the limits it was checked against.
  Check(ElementsOf(v->output_shape) == p.batch * p.m * p.n);
  Check(v->output_bytes ==
        p.batch * p.m * p.n * static_cast<int64_t>(gemmd::DataTypeSize(p.c_type)));
  Check(p.batch * p.m * p.n <= kMaxElements);
  Check(residency.keep_c ||
        v->output_bytes <= kMaxMessageBytes - gemmd::kResponseOverheadBytes);
  if (!residency.a) Check(p.ElementsA() <= kMaxElements);
  if (!residency.b) Check(p.ElementsB() <= kMaxElements);
  if (p.Flops() <= kMaxReferenceFlops) {
    const std::vector<double> c_ref = gemmd::ReferenceGemm(p, v->operands);
    Check(static_cast<int64_t>(c_ref.size()) == p.batch * p.m * p.n);
  }
}

void FuzzQuantized(const ByteRuns& runs, uint8_t flags) {
  gemmd::wire::QuantizedMatmulRequestWire parsed;
  if (!gemmd::wire::ParseQuantizedMatmulRequest(runs, &parsed).ok()) return;
  const ExactCopy a_data(parsed.a_data), a_scales(parsed.a_scales),
      a_dense(parsed.a_dense_data), b_data(parsed.b_data), b_scales(parsed.b_scales);
  gemmd::wire::QuantizedPayloads payloads;
  payloads.a_data = a_data.view();
  payloads.a_scales = a_scales.view();
  payloads.a_dense_data = a_dense.view();
  payloads.b_data = b_data.view();
  payloads.b_scales = b_scales.view();
  gemmd::ResidentOperands resident;
  resident.a = flags & 2;
  resident.b = flags & 4;
  const absl::StatusOr<gemmd::ValidatedQuantized> v = gemmd::ValidateQuantizedMatmul(
      parsed.head, payloads, {kMaxMessageBytes, kMaxElements}, resident);
  if (!v.ok()) {
    Check(!v.status().message().empty());
    return;
  }
  Check(v->m >= 1 && v->n >= 1 && v->k >= 1);
  Check(v->output_bytes == v->m * v->n * 4);
  Check(v->output_bytes + gemmd::kResponseOverheadBytes <= kMaxMessageBytes);
  Check(v->m * v->n <= kMaxElements);
  if (!resident.b) Check(v->n * v->k <= kMaxElements);
  // Decoding reads every data and scale byte the shapes imply; resident scales were not
  // checked here (the store checked them), so a NaN scale may be refused, never crash.
  std::vector<float> a(v->m * v->k), b(v->n * v->k);
  const absl::Status decoded =
      gemmd::DequantizeOperands(parsed.head, *v, payloads, a.data(), b.data());
  Check(decoded.ok() || resident.a || resident.b);
  const gemmd::QuantizedOperands packed = gemmd::PackedOperands(parsed.head, *v, payloads);
  Check(packed.m == v->m && packed.n == v->n && packed.k == v->k);
}

}  // namespace

// The generated parser logs every non-UTF-8 kernel name it refuses; quiet it.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  ByteRuns runs;
  runs.Append(absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  if (flags & 1) {
    FuzzQuantized(runs, flags);
  } else {
    FuzzMatmul(runs, flags);
  }
  return 0;
}
