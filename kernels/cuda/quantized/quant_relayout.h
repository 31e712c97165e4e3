// Quantized weights moved between the canonical layout and the swap-AB one
// (kernels/quant_prepack.h) in device memory: the upload's in-place relayout, and the
// unpack a kernel that reads the canonical layout needs when the stored weight is swap-AB.
// The same bytes as quant_prepack.h's host functions. Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_RELAYOUT_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_RELAYOUT_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/quant_formats.h"

namespace gemmd::gpu {

// Scratch RelayoutSwapAbInPlace needs for an [n, k] weight of `format`: one band.
size_t SwapAbRelayoutScratchBytes(QuantFormat format, int64_t n, int64_t k);

// A canonical [n, k] weight of `format` (data at `data`, NVFP4 scales at `scales`; INT8's
// row scales do not move) re-laid out in place, band by band through `scratch`
// (SwapAbRelayoutScratchBytes). Enqueued on `stream`; all device pointers.
// INVALID_ARGUMENT for a shape without the layout or too little scratch; INTERNAL for a
// CUDA error.
absl::Status RelayoutSwapAbInPlace(QuantFormat format, int64_t n, int64_t k, void* data,
                                   void* scales, void* scratch, size_t scratch_bytes,
                                   cudaStream_t stream);

// A canonical [n, k] weight -> the swap-AB layout at out_data / out_scales (NVFP4; INT8's
// row scales are not touched), not in place: a launch's copy of an inline weight for the
// swap-AB kernels. Enqueued on `stream`.
absl::Status PrepackSwapAb(QuantFormat format, int64_t n, int64_t k, const void* data,
                           const void* scales, void* out_data, void* out_scales,
                           cudaStream_t stream);

// A swap-AB [n, k] weight -> the canonical layout at out_data / out_scales (NVFP4; INT8's
// row scales are not touched), not in place. Enqueued on `stream`.
absl::Status UnpackSwapAb(QuantFormat format, int64_t n, int64_t k, const void* data,
                          const void* scales, void* out_data, void* out_scales,
                          cudaStream_t stream);

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_RELAYOUT_H_
