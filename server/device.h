// A compute device the server schedules work on: the CPU backend today, one per GPU with
// the CUDA backend. The executor owns devices and calls Run() from one worker thread per
// device; every other method is thread-safe and cheap.
#ifndef GEMMD_SERVER_DEVICE_H_
#define GEMMD_SERVER_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

struct DeviceDescription {
  int index = 0;
  std::string kind;  // "cpu" or "cuda"
  std::string name;  // "cpu:0 (OpenBLAS, 8 threads)"
  std::string compute_capability;
  int64_t memory_bytes = 0;
  int threads = 0;
};

struct KernelDescription {
  std::string name;
  Precision precision = Precision::kFp32;
  std::string min_compute_capability;
};

struct RunTiming {
  absl::Duration copy_in;
  absl::Duration compute;
  absl::Duration copy_out;
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

  // Runs a validated problem whose operands are in host memory (c_out included) with a
  // kernel SelectKernel returned. Fills per-phase times. Not reentrant: one caller.
  virtual absl::Status Run(const GemmProblem& problem, const GemmOperands& host_operands,
                           absl::string_view kernel, RunTiming* timing) = 0;

  virtual bool healthy() const = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICE_H_
