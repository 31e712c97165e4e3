// The CPU backend's GEMM, the embedded default on machines without a GPU.
//
// FP32 precision: OpenBLAS cblas_sgemm (OpenBLAS threads = cores). FP16/BF16 inputs are
// widened to FP32 exactly. FP16_TENSOR precision is emulated faithfully: each operand is
// rounded to the tensor path's type (FP16, or BF16 for BF16 inputs, see
// TensorOperandType) and the products are accumulated in FP32, as the tensor cores do.
// C output may be FLOAT32, FLOAT16 or BFLOAT16 (computed in FP32, rounded once). FP64
// precision: cblas_dgemm on FLOAT64 operands, C FLOAT64.
//
// Thread-safe as far as OpenBLAS is (the server calls it from one device worker).
#ifndef GEMMD_KERNELS_CPU_CPU_GEMM_H_
#define GEMMD_KERNELS_CPU_CPU_GEMM_H_

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

// Registry names of the CPU backend's two kernels (ServerInfo, responses, the client).
inline constexpr char kCpuSgemmKernel[] = "cpu_sgemm_openblas";
inline constexpr char kCpuTensorKernel[] = "cpu_hgemm_emulated_openblas";
inline constexpr char kCpuDgemmKernel[] = "cpu_dgemm_openblas";

// The name of the kernel CpuGemm runs for `precision`.
inline const char* CpuKernelName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return kCpuSgemmKernel;
    case Precision::kFp64:
      return kCpuDgemmKernel;
    case Precision::kFp16Tensor:
      break;
  }
  return kCpuTensorKernel;
}

// Runs `problem` on host memory. The problem must already be validated by the caller;
// this still rejects what it cannot run with INVALID_ARGUMENT (unsupported dtypes,
// dimensions beyond OpenBLAS's 32-bit indices, missing C input when beta != 0).
// Allocates FP32 scratch only for operands that need conversion.
absl::Status CpuGemm(const GemmProblem& problem, const GemmOperands& operands);

// dst[i] = float(src[i]) for FLOAT32, FLOAT16 or BFLOAT16 elements (exact; other types
// write nothing).
void WidenToFloat(const void* src, DataType type, int64_t count, float* dst);

// The most threads OpenBLAS uses for one call (small GEMMs run on the calling thread).
int CpuGemmThreads();

}  // namespace gemmd

#endif  // GEMMD_KERNELS_CPU_CPU_GEMM_H_
