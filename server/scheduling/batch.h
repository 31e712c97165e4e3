// What the batcher forms: jobs that one launch can serve, and the key that decides which
// jobs may share a launch (docs/ARCHITECTURE.md, "Batching and placement").
#ifndef GEMMD_SERVER_SCHEDULING_BATCH_H_
#define GEMMD_SERVER_SCHEDULING_BATCH_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"
#include "server/devices/device.h"
#include "server/devices/kernel_catalogue.h"
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
  uint64_t alpha_bits = 0;
  uint64_t beta_bits = 0;
  // Jobs against one resident B: the same B, and (stacked jobs) any M.
  const void* shared_b = nullptr;
  bool stacked = false;  // m is then 0, and kernel is null unless forced
  bool quantized = false;
  int device = -1;  // the device the jobs must run on, -1 for any

  bool operator==(const BatchKey& o) const {
    return kernel == o.kernel && precision == o.precision && a_type == o.a_type &&
           b_type == o.b_type && c_type == o.c_type && m == o.m && n == o.n && k == o.k &&
           transpose_a == o.transpose_a && transpose_b == o.transpose_b &&
           alpha_bits == o.alpha_bits && beta_bits == o.beta_bits && shared_b == o.shared_b &&
           stacked == o.stacked && quantized == o.quantized && device == o.device;
  }
  template <typename H>
  friend H AbslHashValue(H h, const BatchKey& key) {
    return H::combine(std::move(h), key.kernel, key.precision, key.a_type, key.b_type,
                      key.c_type, key.m, key.n, key.k, key.transpose_a, key.transpose_b,
                      key.alpha_bits, key.beta_bits, key.shared_b, key.stacked, key.quantized,
                      key.device);
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
// The same for a job: quantized jobs (packed operands) run alone unless stackable; a job
// against a resident B shares launches with others against that B (B broadcast).
bool IsBatchable(const Job& job);

// Whether a job can be stacked with others against its resident B: its A rows (all its
// batch items' rows, B being one matrix) go after the other jobs' in one GEMM, and its C
// rows come back in the same place. Dense A not transposed; for a QuantizedMatmul, a
// dense A (weight-only).
bool IsStackable(const Job& job);
// The rows a stackable job adds to a stacked launch.
int64_t StackedRows(const Job& job);

struct Batch {
  // The launch: the jobs' batch items concatenated in job order (batch = their sum,
  // dense strides), or the single job's own problem when it is not batchable; stacked:
  // one GEMM of all the jobs' A rows against their shared B.
  GemmProblem problem;
  std::vector<std::unique_ptr<Job>> jobs;
  // The kernel of the launch: the jobs' own, or for a stack the one chosen for it
  // (ReadyToLaunch); null until then for a stack whose jobs forced none.
  const Kernel* kernel = nullptr;
  bool stacked = false;
  // A stacked QuantizedMatmul's launch operands (StackedQuantized).
  std::unique_ptr<QuantizedOperands> stacked_quantized;
};

// A batch formed from a queue on its way to a device: its work (FLOPs, which placement
// balances) and the bytes its jobs hold (JobBytes; released when it is done).
struct FormedBatch {
  Batch batch;
  double flops = 0;
  int64_t bytes = 0;
};

// A job leaving without reaching a device, and why.
struct DroppedJob {
  std::unique_ptr<Job> job;
  absl::Status status;
};

// Why a job must not run at `now`: DEADLINE_EXCEEDED once its deadline has passed,
// CANCELLED once its caller gave up; else OK.
absl::Status DropReason(const Job& job, absl::Time now);
// Answers each dropped job (its `done`, with the time it waited).
void AnswerDropped(std::vector<DroppedJob> dropped);

// The launch problem for `jobs` (non-empty, one key; several only when all batchable).
GemmProblem PackedProblem(const std::vector<std::unique_ptr<Job>>& jobs);
// The launch problem and (QuantizedMatmul) operands for stacking `jobs` (one key, all
// stackable): m is the sum of their rows; the quantized A is empty (the device gathers
// the jobs' rows) and B is the first job's.
GemmProblem StackedProblem(const std::vector<std::unique_ptr<Job>>& jobs);
std::unique_ptr<QuantizedOperands> StackedQuantized(const std::vector<std::unique_ptr<Job>>& jobs);

// The launches for `batch` as it leaves for its device, its jobs perhaps fewer than when
// it formed (some dropped at the last look; none left: no launch): its problem for the
// jobs it has, and its kernel: the jobs' own, or for a stack of several the one
// `catalogue` chooses for the stack's M (KernelCatalogue::Choose; a stacked
// QuantizedMatmul must stay on a quantized kernel). A stack of one job runs alone; a
// stack no kernel runs (or with no catalogue) becomes each job alone, on its own kernel.
std::vector<Batch> ReadyToLaunch(Batch batch, const KernelCatalogue* catalogue);

// The device's view of a batch ready to launch: its kernel, problem and each job's
// operands.
DeviceLaunch LaunchOf(const Batch& batch);

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_BATCH_H_
