// gemm-cli bench --verify: a sample of the answers kept while the bench runs (the first
// successful one, then every kEvery-th, as many as fit in kMaxBytes, at most
// kMaxSamples), then each checked against one FP64 reference: the bench sends one
// request over and over, so one reference serves every answer. Thread-safe.
#ifndef GEMMD_CLIENT_CLI_BENCH_VERIFY_H_
#define GEMMD_CLIENT_CLI_BENCH_VERIFY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client_cli/matmul_inputs.h"
#include "client_cli/quantized_inputs.h"

namespace gemmd {

class AnswerSampler {
 public:
  static constexpr int64_t kEvery = 256;
  static constexpr int kMaxSamples = 16;
  static constexpr int64_t kMaxBytes = int64_t{256} << 20;

  // `c_bytes`: the size of every answer's C.
  explicit AnswerSampler(int64_t c_bytes);
  // C of a successful answer; kept when its turn has come.
  void Offer(absl::string_view c);
  std::vector<std::string> Take();

 private:
  const int max_samples_;
  absl::Mutex mu_;
  int64_t offered_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> kept_ ABSL_GUARDED_BY(mu_);
};

struct SampleCheck {
  int checked = 0;
  double max_error = 0;  // relative Frobenius error, the worst sample's
  double tolerance = 0;
  bool pass() const { return checked > 0 && max_error <= tolerance; }
};

// The samples against the FP64 reference of `dense` (its tolerance: ToleranceFor) or of
// `quantized`'s dequantized operands (kQuantizedKernelTolerance); exactly one is given.
// FAILED_PRECONDITION when an operand sent by handle was not downloaded.
absl::StatusOr<SampleCheck> CheckSamples(const MatmulInputs* dense,
                                         const QuantizedInputs* quantized,
                                         const std::vector<std::string>& samples);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_BENCH_VERIFY_H_
