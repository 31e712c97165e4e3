#include "server/scheduling/batch.h"

#include <cstring>

namespace gemmd {

BatchKey BatchKeyOf(const Job& job) {
  const GemmProblem& p = job.problem;
  BatchKey key;
  key.kernel = job.kernel;
  key.precision = p.precision;
  key.a_type = p.a_type;
  key.b_type = p.b_type;
  key.c_type = p.c_type;
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  key.transpose_a = p.transpose_a;
  key.transpose_b = p.transpose_b;
  std::memcpy(&key.alpha_bits, &p.alpha, sizeof(float));
  std::memcpy(&key.beta_bits, &p.beta, sizeof(float));
  return key;
}

int64_t JobBytes(const Job& job) {
  if (job.quantized == nullptr) return OperandBytes(job.problem);
  const QuantizedOperands& q = *job.quantized;
  int64_t bytes = static_cast<int64_t>(q.b.data.size() + q.b.scales.size()) +
                  q.m * q.n * static_cast<int64_t>(sizeof(float));
  bytes += q.a.has_value() ? static_cast<int64_t>(q.a->data.size() + q.a->scales.size())
                           : static_cast<int64_t>(q.a_dense.size());
  if (job.kernel != nullptr) bytes += job.kernel->HostWorkspaceBytes(q);
  return bytes;
}

bool IsBatchable(const GemmProblem& p) {
  if (p.batch == 1) return true;
  return p.StrideA() == p.m * p.k && p.StrideB() == p.k * p.n && p.StrideC() == p.m * p.n &&
         (p.beta == 0.0f || p.StrideCIn() == p.m * p.n);
}

bool IsBatchable(const Job& job) {
  return job.quantized == nullptr && IsBatchable(job.problem);
}

GemmProblem PackedProblem(const std::vector<std::unique_ptr<Job>>& jobs) {
  GemmProblem packed = jobs.front()->problem;
  if (jobs.size() == 1) return packed;
  packed.batch = 0;
  for (const std::unique_ptr<Job>& job : jobs) packed.batch += job->problem.batch;
  packed.batch_stride_a = packed.batch_stride_b = -1;
  packed.batch_stride_c_in = packed.batch_stride_c = -1;
  return packed;
}

DeviceLaunch LaunchOf(const Batch& batch) {
  DeviceLaunch launch;
  launch.kernel = batch.jobs.front()->kernel;
  launch.problem = batch.problem;
  launch.items.reserve(batch.jobs.size());
  for (const std::unique_ptr<Job>& job : batch.jobs) {
    const HostPieces& p = job->pieces;
    const bool pieces = !p.a.empty() || !p.b.empty() || !p.c_in.empty();
    launch.items.push_back({job->problem, job->operands, pieces ? &p : nullptr, job->quantized,
                            job->is_cancelled ? &job->is_cancelled : nullptr});
  }
  return launch;
}

}  // namespace gemmd
