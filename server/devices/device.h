// A compute device the server schedules work on: the CPU backend, or one GPU with the
// CUDA backend. It runs launches the scheduler forms (DeviceLaunch: the kernel chosen at
// admission, the launch problem, each request's host operands); the kernel choice itself
// is the backend's KernelCatalogue's. The scheduler calls Run() from `lanes()` worker
// threads per device, each with its own lane index; every other method is thread-safe
// and cheap.
#ifndef GEMMD_SERVER_DEVICES_DEVICE_H_
#define GEMMD_SERVER_DEVICES_DEVICE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"
#include "kernels/quantized_operands.h"

namespace gemmd {

struct DeviceDescription {
  int index = 0;
  std::string kind;  // "cpu" or "cuda"
  std::string name;  // "cpu:0 (OpenBLAS, 8 threads)", "cuda:1 (NVIDIA H200)"
  std::string compute_capability;
  int64_t memory_bytes = 0;
  int threads = 0;
};

// Operands still in the pieces they arrived in (a received message's slices), for a
// device that gathers them itself (Device::gathers_pieces): an operand whose pointer in
// GemmOperands is null is these pieces, back to back.
struct HostPieces {
  std::vector<absl::string_view> a, b, c_in;
};

// One request's part of a launch.
struct LaunchItem {
  GemmProblem problem;  // its own (a dense launch packs the items' batch items in order)
  GemmOperands host;    // host memory, valid until the launch returns; C goes to c_out
  // Operands left in pieces (null: none); only for a device that gathers_pieces().
  const HostPieces* pieces = nullptr;
  // Packed QuantizedMatmul operands (then the launch has this one item, `problem` is the
  // FP32 equivalent and host.a/b are unused).
  const QuantizedOperands* quantized = nullptr;
  // Whether the item's caller has given up (may be null): the scheduler drops such items
  // before the launch; a device that runs long may skip their work.
  const std::function<bool()>* cancelled = nullptr;
};

// What a device runs: one launch of `kernel` (from this device's backend catalogue).
struct DeviceLaunch {
  const Kernel* kernel = nullptr;
  // The items' batch items back to back with dense strides, or the single item's own
  // problem (its strides) when it runs alone.
  GemmProblem problem;
  std::vector<LaunchItem> items;
};

// How long each phase of one launch took.
struct LaunchTimes {
  absl::Duration copy_in;   // host operands -> device (staging included)
  absl::Duration compute;   // the launch
  absl::Duration copy_out;  // results -> the callers' buffers
};

// Memory a device holds, for gemm_device_memory_bytes{kind}.
struct DeviceMemoryUsage {
  int64_t device_pool_bytes = 0;   // device memory held by the pool (operands, workspace)
  int64_t device_limit_bytes = 0;  // the pool's cap
  int64_t pinned_bytes = 0;        // page-locked host staging buffers
};

// Bytes of A, B, C_in (when beta != 0) and C of a dense problem: what a request holds in
// host memory while it waits, and in device memory while it runs.
int64_t OperandBytes(const GemmProblem& problem);

// Where each item's operands sit in a dense launch's device regions: every region is the
// items' operands back to back in order, so item j's A starts at a_offset[j] bytes into
// the A region (likewise B, C_in, C). C_in has its own region (empty when beta is 0): a
// broadcast C_in cannot share C's place.
struct LaunchLayout {
  std::vector<int64_t> a_offset, b_offset, c_in_offset, c_offset;
  int64_t a_bytes = 0;  // region sizes
  int64_t b_bytes = 0;
  int64_t c_in_bytes = 0;
  int64_t c_bytes = 0;
};
LaunchLayout LayoutOf(const std::vector<LaunchItem>& items);

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceDescription& description() const = 0;

  // How many Run calls may run at once (each on its own lane in [0, lanes())). GPUs use
  // two, so one launch's copies overlap the previous launch's compute.
  virtual int lanes() const { return 1; }

  // Operand and result bytes (OperandBytes) one launch may have on the device; the
  // scheduler never forms a larger launch and refuses a single request that is larger.
  virtual int64_t max_batch_bytes() const { return std::numeric_limits<int64_t>::max(); }

  // Whether Run takes dense operands as HostPieces (the CUDA device's staging gathers
  // them, so they need not be made contiguous on the host first).
  virtual bool gathers_pieces() const { return false; }

  // Runs `launch` on lane `lane`: stages the items' host operands, launches the kernel,
  // copies each item's C to its c_out. All items share the outcome. A CUDA fault also
  // makes healthy() false from then on.
  virtual absl::Status Run(const DeviceLaunch& launch, int lane, LaunchTimes* times) = 0;

  virtual bool healthy() const = 0;
  virtual DeviceMemoryUsage memory() const { return {}; }
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_DEVICE_H_
