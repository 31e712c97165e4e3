// Tensor maps for the TMA kernels (sm_90a): how the copy engine sees an operand in global
// memory. Host only; the driver's encoder is reached through the runtime (no libcuda link).
#ifndef GEMMD_KERNELS_CUDA_COMMON_TENSOR_MAP_H_
#define GEMMD_KERNELS_CUDA_COMMON_TENSOR_MAP_H_

#include <cuda.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemmd::gpu::internal {

// An [items, outer, inner] operand of `element_bytes`-byte elements (row stride `ld`,
// item stride `stride` elements; stride 0 or items 1: one item for all) as a 3-D tensor
// map of boxes of box_inner x box_outer (x box_items) elements (box_inner * element_bytes
// == 128: the 128-byte swizzle the wgmma descriptors read; with `swizzle` false, any
// multiple of 16 bytes up to 256 elements, rows packed as they are), zeros past every edge.
// INTERNAL when the driver cannot encode it (e.g. a base or row stride not a multiple of
// 16 bytes).
absl::Status MakeTensorMap3d(CUtensorMap* map, CUtensorMapDataType type, int element_bytes,
                             const void* base, int64_t inner, int64_t outer, int64_t ld,
                             int64_t stride, int items, int box_inner, int box_outer,
                             int box_items = 1, bool swizzle = true);

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_COMMON_TENSOR_MAP_H_
