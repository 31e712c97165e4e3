// What the batcher forms: jobs that one launch can serve, and the key that decides which
// jobs may share a launch (docs/ARCHITECTURE.md, "Batching and placement").
#ifndef GEMMD_SERVER_SCHEDULING_BATCH_H_
#define GEMMD_SERVER_SCHEDULING_BATCH_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"
#include "server/devices/device.h"
#include "server/scheduling/job.h"

namespace gemmd {

// Jobs with equal keys can run as one strided-batched launch: same kernel, precision,
// data types, M, N, K, transposes, alpha and beta. alpha and beta are part of the key
// because a launch takes one of each.
struct BatchKey {
  const Kernel* kernel = nullptr;
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

  bool operator==(const BatchKey& o) const {
    return kernel == o.kernel && precision == o.precision && a_type == o.a_type &&
           b_type == o.b_type && c_type == o.c_type && m == o.m && n == o.n && k == o.k &&
           transpose_a == o.transpose_a && transpose_b == o.transpose_b &&
           alpha_bits == o.alpha_bits && beta_bits == o.beta_bits;
  }
  template <typename H>
  friend H AbslHashValue(H h, const BatchKey& key) {
    return H::combine(std::move(h), key.kernel, key.precision, key.a_type, key.b_type,
                      key.c_type, key.m, key.n, key.k, key.transpose_a, key.transpose_b,
                      key.alpha_bits, key.beta_bits);
  }
};

BatchKey BatchKeyOf(const Job& job);

// What a job holds while it waits and runs: OperandBytes (device.h) of its problem, or
// for packed quantized operands their wire bytes (codes, scales, a dense A) and the FP32
// result; plus the host memory its kernel allocates while it runs.
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
  std::vector<std::unique_ptr<Job>> jobs;
};

// The launch problem for `jobs` (non-empty, one key; several only when all batchable).
GemmProblem PackedProblem(const std::vector<std::unique_ptr<Job>>& jobs);

// The device's view of a batch: its kernel, problem and each job's operands.
DeviceLaunch LaunchOf(const Batch& batch);

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_BATCH_H_
