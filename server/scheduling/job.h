// One accepted GEMM request on its way to a device, and what comes back. The service's
// request object (server/rpc/gemm_request.h) is a Job: it carries the operands and the
// kernel chosen at admission through the scheduler, and owns what the operands point
// into until its `done` has run.
#ifndef GEMMD_SERVER_SCHEDULING_JOB_H_
#define GEMMD_SERVER_SCHEDULING_JOB_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"
#include "kernels/quantized_operands.h"
#include "server/devices/device.h"

namespace gemmd {

struct JobResult {
  std::string device;
  // The kernel that ran the job's launch (a stack's may not be the one chosen for the
  // job alone); null when the job did not reach a device.
  const Kernel* kernel = nullptr;
  absl::Duration queue;  // queued -> its batch started on a device
  absl::Duration copy_in;
  absl::Duration compute;
  absl::Duration copy_out;
  uint32_t batch_size = 1;  // jobs that shared the launch
};

struct Job {
  virtual ~Job() = default;

  GemmProblem problem;
  // Host memory valid until `done` runs; c_out receives C. An operand whose pointer is
  // null is in `pieces` (only for devices that gather pieces).
  GemmOperands operands;
  HostPieces pieces;
  // The kernel for the job's own launch, chosen at admission (KernelCatalogue::Choose);
  // never null once queued. A stack of jobs against one resident B runs on the one
  // chosen for the stack (Batch::kernel) unless the jobs forced theirs.
  const Kernel* kernel = nullptr;
  // Set for a QuantizedMatmul that runs on a quantized kernel: the packed operands
  // (operands.a/b are then unused; `problem` is the FP32 equivalent, which sizes
  // admission and placement). Such jobs always run alone.
  const QuantizedOperands* quantized = nullptr;
  // Operands that are resident tensors in device memory (server/store); null ones come
  // from `operands` / `pieces` / `quantized`. On a backend whose resident memory is host
  // memory they are plain host operands instead, and this stays empty.
  DeviceOperands resident;
  // A resident B (its memory, wherever it is), or null: jobs against the same resident B
  // share launches however their M differ (stacked: their A rows one after another).
  const void* shared_b = nullptr;
  // The device the job must run on (where its resident tensors are), or -1 for any.
  int device = -1;
  // Whether the request named its kernel (then a stacked launch keeps it).
  bool kernel_forced = false;
  absl::Time accepted;  // when it was queued (validated, operands prepared)
  absl::Time deadline = absl::InfiniteFuture();
  // True once the caller gave up; polled before the job reaches a device. May be empty.
  std::function<bool()> is_cancelled;
  // Called exactly once, from an executor thread, with OK or the reason it failed.
  std::function<void(const absl::Status&, const JobResult&)> done;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_JOB_H_
