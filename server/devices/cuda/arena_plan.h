// Where one launch's operands go in a lane's device arena and what is copied in and out:
// plain arithmetic on the launch (no CUDA call, no GPU), so it is tested on any machine
// (tests/arena_plan_test.cc). CudaDevice (cuda_device.cc) acquires an arena of
// `workspace_at` bytes plus the kernel's workspace, performs the copies and launches the
// kernel on the regions named here.
//
// Dense: A | B | C_in | C | (C_in32 | C32 when C is FP16/BF16: the kernels compute FP32)
// | workspace; each region 256-byte aligned, the items back to back inside it (the dense
// layout of the packed problem). Quantized: A | A scales | B codes | B scales | C |
// workspace. An operand resident in device memory is read (or, for a kept C, written)
// where it is when the kernel can; otherwise it is copied within the device.
#ifndef GEMMD_SERVER_DEVICES_CUDA_ARENA_PLAN_H_
#define GEMMD_SERVER_DEVICES_CUDA_ARENA_PLAN_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quantized_operands.h"
#include "server/devices/device.h"

namespace gemmd {

// Region starts in the arena: cudaMalloc's alignment, more than any kernel's vector loads
// need, so the kernels never repack an operand for alignment's sake.
inline constexpr int64_t kRegionAlignment = 256;

inline int64_t AlignUp(int64_t bytes) {
  return (bytes + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

// `bytes` from `from` (host memory, or device memory when from_device) to arena offset `at`.
struct ArenaCopyIn {
  const void* from = nullptr;
  int64_t at = 0;
  int64_t bytes = 0;
  bool from_device = false;
};
// `bytes` at arena offset `at` to `to` (a caller's host buffer, or device memory: a C kept
// resident).
struct ArenaCopyOut {
  int64_t at = 0;
  void* to = nullptr;
  int64_t bytes = 0;
  bool to_device = false;
};

struct ArenaCopies {
  std::vector<ArenaCopyIn> in;  // in arena order
  std::vector<ArenaCopyOut> out;
  int64_t workspace_at = 0;  // the operands' end: the kernel's workspace starts here
};

struct DenseArena {
  ArenaCopies copies;
  int64_t a_at = 0, b_at = 0, c_in_at = 0, c_at = 0;
  // Where the kernel reads C_in and writes C in FP32: c_in_at / c_at, or the widened
  // copies when `converts`.
  int64_t c_in32_at = 0, c32_at = 0;
  // A B that every item reads in device memory (a resident tensor), read in place; null
  // when B is staged.
  const void* resident_b = nullptr;
  bool reads_c_in = false;  // beta != 0
  bool converts = false;    // C is FP16/BF16
  int64_t c_in_elements = 0, c_elements = 0;
};

// INVALID_ARGUMENT when an item lacks a buffer the launch reads or writes (a null one
// would crash the staging copy instead of failing the launch).
absl::StatusOr<DenseArena> PlanDenseArena(const DeviceLaunch& launch);

struct QuantizedArena {
  ArenaCopies copies;
  // The launch's operands: the one item's, or the stack's (m = every item's rows).
  const QuantizedOperands* operands = nullptr;
  int64_t a_at = 0, a_scales_at = 0, b_at = 0, b_scales_at = 0, c_at = 0;
  // Operands read (C written) where they are resident; null: in the arena.
  const void* resident_a = nullptr;
  const void* resident_a_scales = nullptr;
  const void* resident_b = nullptr;
  const void* resident_b_scales = nullptr;
  void* resident_c = nullptr;
};

// For a kernel that reads A packed (reads_packed_a) or dense. INVALID_ARGUMENT for a
// launch such a kernel cannot take: several items that are not a stack, a missing
// result buffer, A not in the form the kernel reads.
absl::StatusOr<QuantizedArena> PlanQuantizedArena(const DeviceLaunch& launch,
                                                  std::string_view kernel_name,
                                                  bool reads_packed_a);

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_ARENA_PLAN_H_
