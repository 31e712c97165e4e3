// A compute device the server schedules work on: the CPU backend, or one GPU with the
// CUDA backend. The batcher owns the scheduling: it calls RunBatch() from `lanes()`
// worker threads per device, each with its own lane index; every other method is
// thread-safe and cheap.
#ifndef GEMMD_SERVER_DEVICE_H_
#define GEMMD_SERVER_DEVICE_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"
#include "server/batch.h"
#include "server/quantized_operands.h"

namespace gemmd {

struct DeviceDescription {
  int index = 0;
  std::string kind;  // "cpu" or "cuda"
  std::string name;  // "cpu:0 (OpenBLAS, 8 threads)", "cuda:1 (NVIDIA H200)"
  std::string compute_capability;
  int64_t memory_bytes = 0;
  int threads = 0;
};

struct KernelDescription {
  std::string name;
  Precision precision = Precision::kFp32;
  std::string min_compute_capability;
};

// What one RunBatch did: the kernel that ran and how long each phase took.
struct BatchRun {
  std::string kernel;
  absl::Duration copy_in;   // host operands -> device (staging included)
  absl::Duration compute;   // the launch
  absl::Duration copy_out;  // results -> the callers' response buffers
};

// Memory a device holds, for gemm_device_memory_bytes{kind}.
struct DeviceMemoryUsage {
  int64_t device_pool_bytes = 0;   // device memory held by the pool (operands, workspace)
  int64_t device_limit_bytes = 0;  // the pool's cap
  int64_t pinned_bytes = 0;        // page-locked host staging buffers
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceDescription& description() const = 0;
  virtual std::vector<KernelDescription> Kernels() const = 0;

  // The kernel that would run `problem`: `forced_kernel` when non-empty and able, else
  // the device's choice. FAILED_PRECONDITION when no kernel here can run it.
  virtual absl::StatusOr<std::string> SelectKernel(const GemmProblem& problem,
                                                   absl::string_view forced_kernel) const = 0;

  // The quantized kernel that runs this QuantizedMatmul from its packed operands
  // (Job::quantized, with Job::forced_kernel = that name): `forced_kernel` when it names
  // one that takes them, else the device's choice. "" when none does, or when
  // `forced_kernel` names a dense kernel: the server then dequantizes on the host and
  // submits the FP32 GEMM. FAILED_PRECONDITION when `forced_kernel` names a quantized
  // kernel that cannot run these operands.
  virtual absl::StatusOr<std::string> SelectQuantizedKernel(
      const QuantizedOperands& /*operands*/, absl::string_view /*forced_kernel*/) const {
    return std::string();
  }
  // Names of the quantized kernels SelectQuantizedKernel can return.
  virtual std::vector<std::string> QuantizedKernels() const { return {}; }

  // How many RunBatch calls may run at once (each on its own lane in [0, lanes())).
  // GPUs use two, so one batch's copies overlap the previous batch's compute.
  virtual int lanes() const { return 1; }

  // Operand and result bytes (OperandBytes, batch.h) one batch may have on the device;
  // the batcher never forms a larger batch and refuses a single job that is larger.
  virtual int64_t max_batch_bytes() const { return std::numeric_limits<int64_t>::max(); }

  // Runs every job of `batch` (their operands are in host memory; each job's C goes to
  // its own c_out) on lane `lane`. All jobs share the outcome. A CUDA fault also makes
  // healthy() false from then on.
  virtual absl::Status RunBatch(const Batch& batch, int lane, BatchRun* run) = 0;

  virtual bool healthy() const = 0;
  virtual DeviceMemoryUsage memory() const { return {}; }
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICE_H_
