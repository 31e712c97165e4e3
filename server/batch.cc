#include "server/batch.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu_quantized_gemm.h"

namespace gemmd {

BatchKey BatchKeyOf(const Job& job) {
  const GemmProblem& p = job.problem;
  BatchKey key;
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
  key.forced_kernel = job.forced_kernel;
  key.quantized = job.quantized != nullptr;
  return key;
}

int64_t OperandBytes(const GemmProblem& p) {
  const int64_t c_size = static_cast<int64_t>(DataTypeSize(p.c_type));
  return p.ElementsA() * static_cast<int64_t>(DataTypeSize(p.a_type)) +
         p.ElementsB() * static_cast<int64_t>(DataTypeSize(p.b_type)) +
         (p.beta != 0.0f ? p.ElementsCIn() * c_size : 0) + p.ElementsC() * c_size;
}

int64_t JobBytes(const Job& job) {
  if (job.quantized == nullptr) return OperandBytes(job.problem);
  const QuantizedOperands& q = *job.quantized;
  int64_t bytes = static_cast<int64_t>(q.b.data.size() + q.b.scales.size()) +
                  q.m * q.n * static_cast<int64_t>(sizeof(float));
  if (q.a.has_value()) return bytes + static_cast<int64_t>(q.a->data.size() + q.a->scales.size());
  bytes += static_cast<int64_t>(q.a_dense.size());
  // The CPU backend's weight-only kernel widens a dense A that is not FP32 to FP32 once
  // (the GPU kernels read FP16 A in place: charging them would refuse large square jobs).
  if (job.forced_kernel == kCpuWeightOnlyKernel && q.a_dense_type != DataType::kFloat32) {
    bytes += q.m * q.k * static_cast<int64_t>(sizeof(float));
  }
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

BatchLayout LayoutOf(const std::vector<std::unique_ptr<Job>>& jobs) {
  BatchLayout layout;
  for (const std::unique_ptr<Job>& job : jobs) {
    const GemmProblem& p = job->problem;
    layout.a_offset.push_back(layout.a_bytes);
    layout.b_offset.push_back(layout.b_bytes);
    layout.c_in_offset.push_back(layout.c_in_bytes);
    layout.c_offset.push_back(layout.c_bytes);
    const int64_t c_size = static_cast<int64_t>(DataTypeSize(p.c_type));
    layout.a_bytes += p.ElementsA() * static_cast<int64_t>(DataTypeSize(p.a_type));
    layout.b_bytes += p.ElementsB() * static_cast<int64_t>(DataTypeSize(p.b_type));
    if (p.beta != 0.0f) layout.c_in_bytes += p.ElementsCIn() * c_size;
    layout.c_bytes += p.ElementsC() * c_size;
  }
  return layout;
}

}  // namespace gemmd
