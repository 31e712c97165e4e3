// What the batcher hands a device: jobs that one launch can serve, and the key that
// decides which jobs may share a launch (docs/ARCHITECTURE.md, "Batching and placement").
#ifndef GEMMD_SERVER_BATCH_H_
#define GEMMD_SERVER_BATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gemm_problem.h"
#include "server/job.h"

namespace gemmd {

// Jobs with equal keys can run as one strided-batched launch: same precision, data
// types, M, N, K, transposes, alpha, beta and forced kernel. alpha and beta are part of
// the key because a launch takes one of each.
struct BatchKey {
  Precision precision = Precision::kFp32;
  DataType a_type = DataType::kFloat32;
  DataType b_type = DataType::kFloat32;
  DataType c_type = DataType::kFloat32;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  uint32_t alpha_bits = 0;
  uint32_t beta_bits = 0;
  std::string forced_kernel;
  bool quantized = false;  // packed QuantizedMatmul operands (Job::quantized)

  bool operator==(const BatchKey& o) const {
    return precision == o.precision && a_type == o.a_type && b_type == o.b_type &&
           c_type == o.c_type && m == o.m && n == o.n && k == o.k &&
           transpose_a == o.transpose_a && transpose_b == o.transpose_b &&
           alpha_bits == o.alpha_bits && beta_bits == o.beta_bits &&
           forced_kernel == o.forced_kernel && quantized == o.quantized;
  }
  template <typename H>
  friend H AbslHashValue(H h, const BatchKey& key) {
    return H::combine(std::move(h), key.precision, key.a_type, key.b_type, key.c_type, key.m,
                      key.n, key.k, key.transpose_a, key.transpose_b, key.alpha_bits,
                      key.beta_bits, key.forced_kernel, key.quantized);
  }
};

BatchKey BatchKeyOf(const Job& job);

// Bytes of A, B, C_in (when beta != 0) and C: what a job holds in host memory while it
// waits, and in device memory while it runs.
int64_t OperandBytes(const GemmProblem& problem);
// What a job holds while it waits and runs: OperandBytes of its problem, or for packed
// quantized operands their wire bytes (codes, scales, a dense A), the FP32 result, and
// on the CPU backend's weight-only kernel an FP32 copy of a dense A that is not FP32.
int64_t JobBytes(const Job& job);

// Whether a job may share a launch with others: its batch items are densely packed.
// A job that broadcasts an operand (batch stride 0) runs alone, with its own strides.
bool IsBatchable(const GemmProblem& problem);
// The same for a job; quantized jobs (packed operands) always run alone.
bool IsBatchable(const Job& job);

struct Batch {
  // The launch: the jobs' batch items concatenated in job order (batch = their sum,
  // dense strides), or the single job's own problem when it is not batchable.
  GemmProblem problem;
  std::string forced_kernel;
  std::vector<std::unique_ptr<Job>> jobs;
};

// The launch problem for `jobs` (non-empty, one key; several only when all batchable).
GemmProblem PackedProblem(const std::vector<std::unique_ptr<Job>>& jobs);

// Where each job's operands sit in the packed device buffers: every region is the
// jobs' operands back to back in job order, so job j's A starts at a_offset[j] bytes
// into the A region (likewise B, C_in, C). C_in has its own region (empty when beta is
// 0): a broadcast C_in cannot share C's place.
struct BatchLayout {
  std::vector<int64_t> a_offset, b_offset, c_in_offset, c_offset;
  int64_t a_bytes = 0;  // region sizes
  int64_t b_bytes = 0;
  int64_t c_in_bytes = 0;
  int64_t c_bytes = 0;
};
BatchLayout LayoutOf(const std::vector<std::unique_ptr<Job>>& jobs);

}  // namespace gemmd

#endif  // GEMMD_SERVER_BATCH_H_
