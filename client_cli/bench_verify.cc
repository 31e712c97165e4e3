#include "client_cli/bench_verify.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/reference_gemm.h"

namespace gemmd {

AnswerSampler::AnswerSampler(int64_t c_bytes)
    : max_samples_(static_cast<int>(
          std::max<int64_t>(1, std::min<int64_t>(kMaxSamples, kMaxBytes / std::max<int64_t>(
                                                                               c_bytes, 1))))) {}

void AnswerSampler::Offer(absl::string_view c) {
  absl::MutexLock lock(&mu_);
  const int64_t turn = offered_++;
  if (turn % kEvery != 0 || static_cast<int>(kept_.size()) >= max_samples_) return;
  kept_.emplace_back(c);
}

std::vector<std::string> AnswerSampler::Take() {
  absl::MutexLock lock(&mu_);
  return std::move(kept_);
}

absl::StatusOr<SampleCheck> CheckSamples(const MatmulInputs* dense,
                                         const QuantizedInputs* quantized,
                                         const std::vector<std::string>& samples) {
  GemmProblem p;
  GemmOperands operands;
  SampleCheck check;
  if (dense != nullptr) {
    if (!dense->has_reference()) {
      return absl::FailedPreconditionError("the operands sent by handle were not downloaded");
    }
    p = dense->problem;
    operands = dense->operands;
    check.tolerance = ToleranceFor(p);
  } else {
    const QuantizedInputs& in = *quantized;
    if (static_cast<int64_t>(in.a_dequantized.size()) != in.m * in.k ||
        static_cast<int64_t>(in.b_dequantized.size()) != in.n * in.k) {
      return absl::FailedPreconditionError("the operands sent by handle were not downloaded");
    }
    p.m = in.m;
    p.n = in.n;
    p.k = in.k;
    p.transpose_b = true;  // B is [N, K]
    operands = {in.a_dequantized.data(), in.b_dequantized.data(), nullptr, nullptr};
    check.tolerance = kQuantizedKernelTolerance;
  }
  const int64_t count = p.batch * p.m * p.n;
  const size_t c_bytes = static_cast<size_t>(count) * DataTypeSize(p.c_type);
  const std::vector<double> ref = ReferenceGemm(p, operands);
  for (const std::string& c : samples) {
    if (c.size() != c_bytes) {
      return absl::InternalError(absl::StrCat("an answer's C has ", c.size(), " bytes; ",
                                              c_bytes, " expected"));
    }
    const double error = RelativeError(ref.data(), c.data(), p.c_type, count);
    // A NaN stays: max() would drop it.
    if (std::isnan(error) || std::isnan(check.max_error)) {
      check.max_error = std::nan("");
    } else {
      check.max_error = std::max(check.max_error, error);
    }
    ++check.checked;
  }
  return check;
}

}  // namespace gemmd
