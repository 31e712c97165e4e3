// The quantized GEMM kernels as catalogue entries, beside the dense ones (gpu_gemm.h):
// each distinct kernel has its own name, says whether it runs a QuantizedMatmul's
// operands on a device, how much workspace it needs and launches over operand regions.
// Host-only header; compiles with g++.
//
//   skinny_<int8|nvfp4>_ring_mma16816    weight-only, FP16 A of 1-8 rows, B through a
//                                         shared-memory ring (quant_skinny.cu)
//   skinny_<int8|nvfp4>_regs_mma16816    weight-only, any dense A (or a quantized A
//                                         dequantized on the host) of 1-64 rows, B loaded
//                                         into registers (quant_skinny.cu)
//   skinny_<int8|nvfp4>_stream_mma16816  weight-only, FP16/BF16 A of 1-64 rows, 128-row
//                                         blocks streaming B (quant_skinny_stream.cu)
//   qgemm_<int8|nvfp4>_<wgmma|mma>_...   both operands quantized (quant_square_*.cu)
//   qgemm_f16xnvfp4_<wgmma|mma>_...      dense FP16 A against NVFP4 B
//   swapab_<int8|nvfp4>_<wgmma|mma16816> weight-only, FP16 A of 1-64 rows, B resident in
//                                         the swap-AB layout (quant_swapab.h)
//
// Which one serves a request is gpu::SelectQuantizedKernel's decision (kernel_select.cc).
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANTIZED_KERNELS_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANTIZED_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/quantized/quant_gemm.h"
#include "kernels/kernel.h"
#include "kernels/quant_formats.h"
#include "kernels/quantized_operands.h"

namespace gemmd::gpu {

// Where one quantized launch's operands sit in device memory.
struct QuantizedDeviceOperands {
  const void* a = nullptr;         // packed codes (reads_packed_a) or dense rows of DenseA
  const void* a_scales = nullptr;  // packed A only
  const void* b = nullptr;         // B's codes
  const void* b_scales = nullptr;
  float* c = nullptr;              // [m, n] FP32
};

enum class QuantizedFamily {
  kSkinny,       // weight-only: dense A (or a dequantized one) of at most 64 rows
  kSquare,       // A and B quantized in one format
  kSquareFp16A,  // dense FP16 A against NVFP4 B
  kSwapAb,       // FP16 A (or NVFP4 A x NVFP4 B) against B in the swap-AB layout
};

class QuantizedGemmKernel : public Kernel {
 public:
  KernelInput input() const final { return KernelInput::kQuantized; }
  Precision precision() const final { return Precision::kFp32; }
  virtual QuantizedFamily family() const = 0;
  // The weight format it decodes (B's, and a packed A's).
  virtual QuantFormat format() const = 0;
  // Whether A goes to the device as packed codes and scales; otherwise as dense rows of
  // DenseA(q) (a quantized A is then dequantized to FP32 on the host: at most
  // kSkinnyQuantizedMaxM rows).
  virtual bool reads_packed_a() const = 0;
  // The layout it reads B in: a resident B kept in another is unpacked into the launch's
  // workspace first (quant_relayout.h).
  virtual WeightLayout b_layout() const { return WeightLayout::kCanonical; }
  // Whether its code runs on a device of `compute_capability` at all.
  virtual bool RunsOn(int compute_capability) const {
    return compute_capability >= min_compute_capability();
  }

  // OK when the kernel runs `q` on the device `caps` describes, with every operand at a
  // 256-byte boundary; else FAILED_PRECONDITION saying why. Kernels whose fit depends on
  // occupancy ask the current device, which must be caps.device (cached per device).
  virtual absl::Status Check(const QuantizedOperands& q, const DeviceCaps& caps) const = 0;
  // Device workspace Launch needs for `q`.
  virtual size_t WorkspaceBytes(const QuantizedOperands& q) const = 0;
  // Enqueues C = dequant(A) * dequant(B)^T on `stream` (current device). Statuses as the
  // family's launcher: INVALID_ARGUMENT / FAILED_PRECONDITION for operands it does not
  // take, INTERNAL for CUDA errors.
  virtual absl::Status Launch(const QuantizedOperands& q, const QuantizedDeviceOperands& d,
                              void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) const = 0;
};

// "skinny_nvfp4_stream_mma16816" for (kNvfp4, kStream): the skinny entries' names.
std::string SkinnyKernelName(QuantFormat format, SkinnyPath path);

// A quantized operand of `rows` x `k` as checks see it before placement: data and scales
// at kArenaAligned.
DeviceQuantizedWeight PlacedWeight(const QuantizedOperand& x, int64_t rows, int64_t k);

// The dense A type a kernel that reads dense rows gets: q's, or FLOAT32 for a quantized A
// (dequantized on the host).
DataType DenseA(const QuantizedOperands& q);

// Every quantized variant compiled into the library, preferred first within a family.
std::vector<std::unique_ptr<QuantizedGemmKernel>> MakeQuantizedKernels();

// The kernel that serves `q` on the device `caps` describes (kernel_select.cc), or
// nullptr where none serves it well: the caller then dequantizes on the host and runs
// the FP32 GEMM. The current device must be caps.device (occupancy queries, cached).
// INTERNAL for CUDA errors of those queries.
absl::StatusOr<const QuantizedGemmKernel*> SelectQuantizedKernel(
    const QuantizedOperands& q, const DeviceCaps& caps,
    const KernelRegistry& registry = KernelRegistry::Global());

// The quantized kernel called `name`, checked against `q` and the device: NOT_FOUND for
// a name that is no quantized kernel; FAILED_PRECONDITION, saying why, when it decodes
// another format or cannot run `q` there.
absl::StatusOr<const QuantizedGemmKernel*> ForceQuantizedKernel(
    std::string_view name, const QuantizedOperands& q, const DeviceCaps& caps,
    const KernelRegistry& registry = KernelRegistry::Global());

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANTIZED_KERNELS_H_
