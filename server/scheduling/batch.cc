#include "server/scheduling/batch.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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
  static_assert(sizeof(p.alpha) == sizeof(key.alpha_bits));
  std::memcpy(&key.alpha_bits, &p.alpha, sizeof(p.alpha));
  std::memcpy(&key.beta_bits, &p.beta, sizeof(p.beta));
  key.shared_b = job.shared_b;
  key.quantized = job.quantized != nullptr;
  key.device = job.device;
  if (IsStackable(job)) {
    key.stacked = true;
    key.m = 0;
    if (!job.kernel_forced) key.kernel = nullptr;  // chosen for each stack
  }
  if (job.quantized != nullptr) {
    // The packed operands decide: format and the dense A's type, N and K.
    key.n = job.quantized->n;
    key.k = job.quantized->k;
    key.b_type = static_cast<DataType>(static_cast<int>(job.quantized->b.format));
    key.a_type = job.quantized->a_dense_type;
  }
  return key;
}

int64_t JobBytes(const Job& job) {
  // A resident B is read where it is: it takes no host memory and no launch memory.
  if (job.quantized == nullptr) {
    const GemmProblem& p = job.problem;
    int64_t bytes = OperandBytes(p);
    if (job.shared_b != nullptr) {
      bytes -= p.ElementsB() * static_cast<int64_t>(DataTypeSize(p.b_type));
    }
    return bytes;
  }
  const QuantizedOperands& q = *job.quantized;
  int64_t bytes = (job.shared_b != nullptr
                       ? 0
                       : static_cast<int64_t>(q.b.data.size() + q.b.scales.size())) +
                  q.m * q.n * static_cast<int64_t>(sizeof(float));
  bytes += q.a.has_value() ? static_cast<int64_t>(q.a->data.size() + q.a->scales.size())
                           : static_cast<int64_t>(q.a_dense.size());
  if (job.kernel != nullptr) bytes += job.kernel->HostWorkspaceBytes(q);
  return bytes;
}

absl::Status DropReason(const Job& job, absl::Time now) {
  if (now > job.deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "deadline passed after ", absl::FormatDuration(absl::Now() - job.accepted),
        " in the queue; the job did not run"));
  }
  if (job.is_cancelled && job.is_cancelled()) {
    return absl::CancelledError("the client cancelled the request before it ran");
  }
  return absl::OkStatus();
}

void AnswerDropped(std::vector<DroppedJob> dropped) {
  for (DroppedJob& d : dropped) {
    JobResult result;
    result.queue = absl::Now() - d.job->accepted;
    d.job->done(d.status, result);
  }
}

bool IsBatchable(const GemmProblem& p) {
  if (p.batch == 1) return true;
  return p.StrideA() == p.m * p.k && p.StrideB() == p.k * p.n && p.StrideC() == p.m * p.n &&
         (p.beta == 0.0 || p.StrideCIn() == p.m * p.n);
}

namespace {

// Dense batch items of A, C and C_in (when read), whatever B's stride.
bool DenseAC(const GemmProblem& p) {
  return p.batch == 1 || (p.StrideA() == p.m * p.k && p.StrideC() == p.m * p.n &&
                          (p.beta == 0.0 || p.StrideCIn() == p.m * p.n));
}

}  // namespace

bool IsBatchable(const Job& job) {
  // A planned row block runs alone: sharing a launch would change its K split.
  if (job.problem.plan_m > 0) return false;
  if (IsStackable(job)) return true;
  if (job.quantized != nullptr) return false;
  if (job.shared_b != nullptr) {
    const GemmProblem& p = job.problem;
    return DenseAC(p) && (p.batch == 1 || p.StrideB() == 0);
  }
  return IsBatchable(job.problem);
}

bool IsStackable(const Job& job) {
  if (job.shared_b == nullptr || job.problem.plan_m > 0) return false;
  if (job.quantized != nullptr) return !job.quantized->a.has_value();
  const GemmProblem& p = job.problem;
  return !p.transpose_a && DenseAC(p) && (p.batch == 1 || p.StrideB() == 0);
}

int64_t StackedRows(const Job& job) {
  return job.quantized != nullptr ? job.quantized->m : job.problem.batch * job.problem.m;
}

GemmProblem StackedProblem(const std::vector<std::unique_ptr<Job>>& jobs) {
  GemmProblem stacked = jobs.front()->problem;
  stacked.batch = 1;
  stacked.m = 0;
  for (const std::unique_ptr<Job>& job : jobs) stacked.m += StackedRows(*job);
  stacked.batch_stride_a = stacked.batch_stride_b = -1;
  stacked.batch_stride_c_in = stacked.batch_stride_c = -1;
  return stacked;
}

std::unique_ptr<QuantizedOperands> StackedQuantized(
    const std::vector<std::unique_ptr<Job>>& jobs) {
  auto q = std::make_unique<QuantizedOperands>(*jobs.front()->quantized);
  q->m = 0;
  for (const std::unique_ptr<Job>& job : jobs) q->m += job->quantized->m;
  q->a_dense = absl::string_view();
  return q;
}

GemmProblem PackedProblem(const std::vector<std::unique_ptr<Job>>& jobs) {
  GemmProblem packed = jobs.front()->problem;
  if (jobs.size() == 1) return packed;
  packed.batch = 0;
  for (const std::unique_ptr<Job>& job : jobs) packed.batch += job->problem.batch;
  packed.batch_stride_a = packed.batch_stride_b = -1;
  packed.batch_stride_c_in = packed.batch_stride_c = -1;
  // Jobs against one resident B read that one matrix, which every batch item shares.
  if (jobs.front()->shared_b != nullptr) packed.batch_stride_b = 0;
  return packed;
}

namespace {

absl::StatusOr<const Kernel*> StackKernel(const Batch& stack, const KernelCatalogue* catalogue) {
  if (catalogue == nullptr) return absl::UnimplementedError("no catalogue");
  absl::StatusOr<KernelChoice> choice =
      catalogue->Choose(stack.problem, stack.stacked_quantized.get(), "");
  if (!choice.ok()) return choice.status();
  if (stack.stacked_quantized != nullptr && choice->path != KernelPath::kPacked) {
    return absl::FailedPreconditionError("no quantized kernel for the stack");
  }
  return choice->kernel;
}

Batch Alone(std::unique_ptr<Job> job) {
  Batch batch;
  batch.jobs.push_back(std::move(job));
  batch.problem = batch.jobs.front()->problem;
  batch.kernel = batch.jobs.front()->kernel;
  return batch;
}

}  // namespace

std::vector<Batch> ReadyToLaunch(Batch batch, const KernelCatalogue* catalogue) {
  std::vector<Batch> launches;
  if (batch.jobs.empty()) return launches;
  if (batch.stacked && batch.jobs.size() > 1) {
    batch.problem = StackedProblem(batch.jobs);
    if (batch.stacked_quantized != nullptr) batch.stacked_quantized = StackedQuantized(batch.jobs);
    if (batch.kernel == nullptr) {
      absl::StatusOr<const Kernel*> kernel = StackKernel(batch, catalogue);
      if (kernel.ok()) batch.kernel = *kernel;
    }
    if (batch.kernel != nullptr) {
      launches.push_back(std::move(batch));
      return launches;
    }
  }
  if (batch.stacked || batch.jobs.size() == 1) {
    for (std::unique_ptr<Job>& job : batch.jobs) launches.push_back(Alone(std::move(job)));
    return launches;
  }
  batch.problem = PackedProblem(batch.jobs);
  batch.kernel = batch.jobs.front()->kernel;
  launches.push_back(std::move(batch));
  return launches;
}

DeviceLaunch LaunchOf(const Batch& batch) {
  DeviceLaunch launch;
  launch.kernel = batch.kernel;
  launch.problem = batch.problem;
  launch.stacked = batch.stacked;
  launch.stacked_quantized = batch.stacked_quantized.get();
  launch.items.reserve(batch.jobs.size());
  for (const std::unique_ptr<Job>& job : batch.jobs) {
    const HostPieces& p = job->pieces;
    const bool pieces = !p.a.empty() || !p.b.empty() || !p.c_in.empty();
    const DeviceOperands& r = job->resident;
    const bool resident = r.a != nullptr || r.b != nullptr || r.c_in != nullptr ||
                          r.c_out != nullptr;
    launch.items.push_back({job->problem, job->operands, pieces ? &p : nullptr, job->quantized,
                            job->is_cancelled ? &job->is_cancelled : nullptr,
                            resident ? &r : nullptr});
  }
  return launch;
}

}  // namespace gemmd
