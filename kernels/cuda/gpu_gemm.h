// The CUDA GEMM kernel library: a registry of kernel variants, a heuristic that picks
// one for a problem and a device, and a way to force one by name. Host-only header;
// compiles with g++ (needs only <cuda_runtime_api.h>, no device code).
//
// Typical use (the server's CudaDevice, the bench, the tests):
//
//   absl::StatusOr<DeviceCaps> caps = QueryDeviceCaps(device);
//   absl::StatusOr<const GpuGemmKernel*> kernel = SelectKernel(problem, *caps);
//   size_t bytes = (*kernel)->WorkspaceBytes(problem);      // 0 for most problems
//   ... device workspace of `bytes` (or a bigger one reused) ...
//   absl::Status s = (*kernel)->Launch(problem, device_operands, workspace, bytes, stream);
//
// Variant names encode the family, tile and pipeline: `sgemm_simt_128x128x8` is the
// FP32 SIMT kernel with a 128x128 block tile and K-step 8; `hgemm_wmma_128x128x32_s4`
// is the FP16 WMMA tensor-core kernel with a 128x128x32 tile and a 4-stage cp.async
// pipeline; `bgemm_…` is the same with BF16 operands; a `_splitk` suffix means the
// variant splits K across blocks for small-M/N, large-K problems (it then needs a
// workspace for the partial sums). docs/KERNELS.md describes each one.
//
// Registered today: sgemm_simt_128x128x8, sgemm_simt_64x64x8_splitk,
// sgemm_simt_16x128x16_splitk (FP32); hgemm_wmma_128x128x32_s4,
// hgemm_wmma_64x64x32_s4_splitk (FP16_TENSOR, FP32 or FP16 inputs);
// bgemm_wmma_128x128x32_s4, bgemm_wmma_64x64x32_s4_splitk (FP16_TENSOR, BF16 inputs);
// on sm_90a builds also hgemm_wgmma_128x256x64_s4, bgemm_wgmma_128x256x64_s4,
// hgemm_wgmma_tma_128x256x64_s4, bgemm_wgmma_tma_128x256x64_s4,
// hgemm_wgmma_tma_64x256x64_s4_splitk and bgemm_wgmma_tma_64x256x64_s4_splitk (Hopper
// wgmma; the tma_ ones load tiles by TMA); dgemm_dmma_128x128x16_s3 and, for 9.0 and
// up, the dgemm_dmma1688_128x64x* ladder (FP64: FLOAT64 in, FP64 tensor cores, FLOAT64 C;
// its steps are registered side by side, the fastest measured chosen).
// The registry lists what a build has.
// All but the FP64 one write FP32 C; FP16/BF16 output is not implemented (Check:
// FAILED_PRECONDITION).
// Workspace is needed for split-K partial sums, for FP32 inputs on the tensor path
// (converted to FP16 first), for FP16/BF16 inputs on the FP32 path (widened), and for
// operands whose rows are not 16-byte aligned (odd K, offset pointers: repacked).
//
// Thread safety: the registry and the kernel objects are immutable after construction;
// every method may be called from any thread. Launch enqueues work on the given stream
// of the current device and does not synchronize.
#ifndef GEMMD_KERNELS_CUDA_GPU_GEMM_H_
#define GEMMD_KERNELS_CUDA_GPU_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"

namespace gemmd::gpu {

// What selection needs to know about a device.
struct DeviceCaps {
  int device = 0;
  std::string name;             // e.g. "NVIDIA H200"
  int compute_capability = 0;   // major * 10 + minor, e.g. 90
  int sm_count = 0;
  int64_t shared_memory_per_block_optin_bytes = 0;
  int64_t l2_cache_bytes = 0;
  int64_t global_memory_bytes = 0;
};

// Reads the properties of CUDA device `device`. INTERNAL on CUDA errors (no device,
// bad ordinal, driver problems).
absl::StatusOr<DeviceCaps> QueryDeviceCaps(int device);

// How a variant splits a problem into thread blocks (selection, logs, metrics).
struct LaunchGeometry {
  int64_t tile_m = 0;
  int64_t tile_n = 0;
  int64_t tile_k = 0;
  int64_t splits = 1;       // K slices (split-K); 1 = none
  int64_t k_per_split = 0;  // K handled by one block
  int64_t blocks = 0;       // thread blocks over all launches of the problem
  // Operand bytes the packer writes before the tile runs (conversions, padding, the
  // transposed copies of a K-major tile), assuming 16-byte aligned operands.
  int64_t pack_bytes = 0;
};

// What the selection's cost model (kernel_select.cc) knows of a variant, from gemm-bench on
// the H200 (132 SMs; docs/KERNELS.md): its full-machine throughput on a large square
// problem, and how many of its blocks are resident on one SM.
struct CostProfile {
  double tflops = 0;
  int blocks_per_sm = 1;
};

// One registered dense kernel variant (Kernel: name, precision, lowest compute
// capability, which also needs the library built for a matching architecture).
// Implementations live in the .cu files of each family.
class GpuGemmKernel : public Kernel {
 public:
  KernelInput input() const final { return KernelInput::kDense; }
  // Operand element type the multiplier consumes (kFloat32, kFloat16, kBFloat16).
  virtual DataType operand_type() const = 0;
  // Whether the variant may split K across blocks (then it may need a workspace).
  virtual bool splits_k() const = 0;
  virtual CostProfile cost_profile() const = 0;
  // Whether the variant runs on a device of this compute capability (major * 10 + minor):
  // at least min_compute_capability(), and exactly 9.0 for sm_90a-only code.
  virtual bool RunsOn(int compute_capability) const {
    return compute_capability >= min_compute_capability();
  }

  // OK when the variant computes `problem` (precision, data types, shapes, strides);
  // otherwise FAILED_PRECONDITION (the variant does not do this kind of problem) or
  // INVALID_ARGUMENT (the problem itself is malformed: negative sizes, a_type != b_type
  // ...), with a message saying why. Does not look at any device.
  virtual absl::Status Check(const GemmProblem& problem) const = 0;
  bool CanImplement(const GemmProblem& problem) const { return Check(problem).ok(); }

  // The launch shape Launch would use; zeros when !CanImplement(problem).
  virtual LaunchGeometry Geometry(const GemmProblem& problem) const = 0;

  // Device workspace bytes Launch needs for `problem`, assuming every operand pointer
  // is 16-byte aligned (cudaMalloc gives 256). The overload with operands is exact for
  // those pointers (a misaligned operand is first repacked into the workspace).
  // 0 when no workspace is needed; undefined when !CanImplement(problem).
  virtual size_t WorkspaceBytes(const GemmProblem& problem) const = 0;
  virtual size_t WorkspaceBytes(const GemmProblem& problem,
                                const GemmOperands& operands) const = 0;

  // Enqueues C = alpha*op(A)*op(B) + beta*C on `stream` (current device). `operands`
  // are device pointers as described in gemm_problem.h (c_in may be null when
  // beta == 0 and is then never read; c_in may equal c_out). `workspace` is device
  // memory of at least WorkspaceBytes(problem, operands) bytes (may be null when that
  // is 0); it must not be used by other work until this launch has finished.
  // Returns FAILED_PRECONDITION / INVALID_ARGUMENT as Check does, INVALID_ARGUMENT for
  // null operands or a too-small workspace, INTERNAL for CUDA errors (launch failures;
  // asynchronous faults show up at the caller's next synchronization).
  virtual absl::Status Launch(const GemmProblem& problem, const GemmOperands& operands,
                              void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) const = 0;
};

class QuantizedGemmKernel;  // quantized_kernels.h

// Every variant compiled into the library, dense and quantized, in a fixed order: the
// one catalogue of the CUDA backend. Names are unique across both.
class KernelRegistry {
 public:
  // The process-wide registry (built on first use; thread-safe).
  static const KernelRegistry& Global();

  const std::vector<const GpuGemmKernel*>& kernels() const { return view_; }
  const std::vector<const QuantizedGemmKernel*>& quantized() const { return quantized_view_; }
  // nullptr when no variant has that name.
  const GpuGemmKernel* Find(std::string_view name) const;
  const QuantizedGemmKernel* FindQuantized(std::string_view name) const;

  KernelRegistry(std::vector<std::unique_ptr<GpuGemmKernel>> kernels,
                 std::vector<std::unique_ptr<QuantizedGemmKernel>> quantized = {});
  ~KernelRegistry();

 private:
  std::vector<std::unique_ptr<GpuGemmKernel>> owned_;
  std::vector<const GpuGemmKernel*> view_;
  std::vector<std::unique_ptr<QuantizedGemmKernel>> quantized_owned_;
  std::vector<const QuantizedGemmKernel*> quantized_view_;
};

// Picks the variant expected to be fastest for `problem` on a device with `caps`
// (heuristic from gemm-bench measurements, docs/KERNELS.md). Never returns null.
// FAILED_PRECONDITION when no variant can run it on that device (e.g. FP16 output,
// tensor path below sm_80), INVALID_ARGUMENT when the problem is malformed.
absl::StatusOr<const GpuGemmKernel*> SelectKernel(
    const GemmProblem& problem, const DeviceCaps& caps,
    const KernelRegistry& registry = KernelRegistry::Global());

// The variant called `name`, checked against the problem and the device.
// NOT_FOUND for an unknown name; FAILED_PRECONDITION when it cannot implement the
// problem or the device's compute capability is too low.
absl::StatusOr<const GpuGemmKernel*> ForceKernel(
    std::string_view name, const GemmProblem& problem, const DeviceCaps& caps,
    const KernelRegistry& registry = KernelRegistry::Global());

// Converts `count` contiguous elements on `stream`, rounding to nearest even: FLOAT32 to
// FLOAT16 or BFLOAT16 and back (the server's FP16/BF16 results and C inputs around the
// FP32-output kernels). `dst` must be 16-byte aligned with room for `count` rounded up
// to 16 bytes (the tail is zeroed). INTERNAL for an unsupported pair or a CUDA error.
absl::Status LaunchConvert(DataType src_type, const void* src, DataType dst_type, void* dst,
                           int64_t count, cudaStream_t stream);

// Lists "name (precision, operand type, sm_XY+)" for logs and ServerInfo.
std::vector<std::string> DescribeKernels(
    const KernelRegistry& registry = KernelRegistry::Global());

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_GPU_GEMM_H_
