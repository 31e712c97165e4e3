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
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"
#include "kernels/quant_prepack.h"
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

// A device's short id, its kind and index ("cuda:1"): what clients name it by.
std::string DeviceId(const DeviceDescription& description);

// Operands still in the pieces they arrived in (a received message's slices), for a
// device that gathers them itself (Device::gathers_pieces): an operand whose pointer in
// GemmOperands is null is these pieces, back to back.
struct HostPieces {
  std::vector<absl::string_view> a, b, c_in;
};

// Operands of one request that are resident tensors already in the device's memory (the
// tensor store's device memory on a GPU); null: the operand is in host memory (or pieces)
// as GemmOperands / QuantizedOperands say. c_out set: C goes there instead of to the
// host (a result kept resident). On a device whose resident memory is host memory
// (resident_in_host_memory), resident operands are plain host operands instead.
struct DeviceOperands {
  const void* a = nullptr;  // dense A, or a QuantizedMatmul's A (codes, or dense rows)
  const void* a_scales = nullptr;
  const void* b = nullptr;  // dense B, or quantized B's codes
  const void* b_scales = nullptr;
  const void* c_in = nullptr;
  void* c_out = nullptr;
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
  // Operands in device memory (null: none).
  const DeviceOperands* resident = nullptr;
};

// What a device runs: one launch of `kernel` (from this device's backend catalogue).
struct DeviceLaunch {
  const Kernel* kernel = nullptr;
  // The items' batch items back to back with dense strides, or the single item's own
  // problem (its strides) when it runs alone. Stacked: one GEMM whose A rows are the
  // items' A rows in order and whose B is the items' shared B (the first item's), so
  // C's rows split back to the items in the same order.
  GemmProblem problem;
  std::vector<LaunchItem> items;
  bool stacked = false;
  // A stacked QuantizedMatmul: the launch's operands (m = all the items' rows; its A is
  // the items' dense A rows, which the device gathers; B is the shared weight).
  const QuantizedOperands* stacked_quantized = nullptr;
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

  // Resident tensors (the tensor store): memory that stays on this device between
  // launches. Host memory unless a backend says otherwise (a GPU: its device memory).
  // AllocateResident gives `bytes` (256-byte aligned, contents undefined) or
  // RESOURCE_EXHAUSTED; FreeResident takes it back (with the same size), or says why it
  // could not (the memory is then still taken); Write/Read copy between host memory and
  // resident memory. All thread-safe, from any thread. Host memory is mapped for each
  // tensor, so a freed tensor's memory goes back to the system at once (the allocator
  // would keep it for reuse).
  virtual absl::StatusOr<void*> AllocateResident(int64_t bytes);
  virtual absl::Status FreeResident(void* memory, int64_t bytes);
  // What an allocation of `bytes` really takes of the device's memory (whole pages for
  // host memory), so the store's cap counts small tensors at their real cost.
  virtual int64_t ResidentFootprint(int64_t bytes) const;
  virtual absl::Status WriteResident(void* resident, const void* host, size_t bytes);
  // Host pieces back to back into resident memory (a received chunk's slices): one
  // transfer where the device can gather them.
  virtual absl::Status WriteResidentRuns(void* resident,
                                         const std::vector<absl::string_view>& runs);
  virtual absl::Status ReadResident(void* host, const void* resident, size_t bytes);
  // Whether resident memory is host memory (then a launch reads it like any host operand).
  virtual bool resident_in_host_memory() const { return true; }

  // The layout this device's kernels read a resident quantized weight [rows, k] of
  // `format` fastest in (kernels/quant_prepack.h); kCanonical where none is faster than
  // the uploaded bytes (the default; every backend today: on a GPU the swap-AB kernels
  // do not yet beat the skinny ones at every M, docs/KERNELS.md).
  virtual WeightLayout PreferredWeightLayout(QuantFormat /*format*/, int64_t /*rows*/,
                                             int64_t /*k*/) const {
    return WeightLayout::kCanonical;
  }
  // Re-lays out a resident quantized weight [rows, k] of `format` uploaded canonical (data
  // at `data`, scales at `scales`, in resident memory) into `layout`, in place; the
  // upload's last step. Here in host memory; a GPU does it in its own. INVALID_ARGUMENT
  // for a shape without that layout, INTERNAL when the device fails.
  virtual absl::Status RelayoutResident(QuantFormat format, int64_t rows, int64_t k, void* data,
                                        void* scales, WeightLayout layout);

  // Page-locks host memory the device then copies to and from by DMA, for every device
  // of the backend (a shared-memory region callers registered); false where the device
  // cannot or need not (the CPU backend reads host memory where it is). UnpinHost undoes
  // a PinHost that returned true.
  virtual bool PinHost(void* /*memory*/, size_t /*bytes*/) { return false; }
  virtual void UnpinHost(void* /*memory*/) {}
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_DEVICE_H_
