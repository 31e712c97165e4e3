// The alignment the launchers check before they hand a pointer to 16-byte vector loads,
// cp.async, TMA or bulk copies. Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_COMMON_ALIGNMENT_H_
#define GEMMD_KERNELS_CUDA_COMMON_ALIGNMENT_H_

#include <cstdint>

namespace gemmd::gpu {

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_COMMON_ALIGNMENT_H_
