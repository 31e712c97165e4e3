// Plain C++ description of one (possibly batched) GEMM, shared by every backend: the CPU
// backend, the CUDA kernels, the FP64 reference, the server and the client. No gRPC, no
// protobuf, no CUDA here.
//
// For each batch item b in [0, batch):
//   C_b[M,N] = alpha * op(A_b)[M,K] * op(B_b)[K,N] + beta * C_b
// Operands are row-major and dense inside a batch item. A_b is stored [M,K], or [K,M]
// when transpose_a; B_b is stored [K,N], or [N,K] when transpose_b. Batch items sit
// batch_stride_* elements apart; a stride of 0 broadcasts one matrix to every item.
#ifndef GEMMD_KERNELS_GEMM_PROBLEM_H_
#define GEMMD_KERNELS_GEMM_PROBLEM_H_

#include <cstddef>
#include <cstdint>

namespace gemmd {

enum class DataType : uint8_t { kFloat32, kFloat16, kBFloat16, kInt8, kInt32, kFloat64 };

// Bytes per element.
size_t DataTypeSize(DataType type);
// "FLOAT32", "FLOAT16", ... (the proto enum names without their prefix).
const char* DataTypeName(DataType type);

enum class Precision : uint8_t {
  // Plain FP32 FMA; FP16/BF16 inputs are widened exactly. No TF32.
  kFp32,
  // Tensor-core path: operands rounded to FP16 (or kept in BF16 when both inputs are
  // BF16), products accumulated in FP32.
  kFp16Tensor,
  // FLOAT64 inputs, products and sums in FP64, C in FLOAT64.
  kFp64,
};
inline constexpr int kNumPrecisions = 3;

const char* PrecisionName(Precision precision);  // "FP32", "FP16_TENSOR", "FP64"

// `v` rounded to FP32 and back: the alpha and beta the FP32 paths compute with. Out of
// line on purpose: GCC 12.2 at -O2 drops two such round trips written side by side (its
// SLP vectorizer pairs them into a conversion it then deletes).
double RoundedToFp32(double v);

// The element type the tensor path feeds to the multiplier for these inputs.
DataType TensorOperandType(DataType input_type);

// A row plan's blocks start on multiples of this many rows (and end on one, or at the
// product's end). The CPU backend computes every GEMM in panels of this many rows, since
// what OpenBLAS gives a row depends on M: a block on a panel boundary then gets the same
// panels, so the same bits, as the whole product. CUDA tiles divide it.
inline constexpr int64_t kRowPlanAlign = 512;

struct GemmProblem {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  DataType a_type = DataType::kFloat32;
  DataType b_type = DataType::kFloat32;
  DataType c_type = DataType::kFloat32;  // output, and the C input when beta != 0
  Precision precision = Precision::kFp32;
  // In FP64, as the caller gave them; kernels of the other precisions take them rounded
  // to FP32.
  double alpha = 1.0;
  double beta = 0.0;
  // Elements between consecutive batch items; 0 = broadcast. Defaults: dense packing.
  int64_t batch_stride_a = -1;
  int64_t batch_stride_b = -1;
  int64_t batch_stride_c_in = -1;
  int64_t batch_stride_c = -1;
  // A row block of a larger product (MatmulRequest.row_plan): rows [plan_row0,
  // plan_row0 + m) of a product of plan_m rows, computed as that product's launch would
  // compute them (the kernel and K split are chosen for plan_m rows), so the block's C is
  // bit-identical to those rows of the whole product's C. 0 = not a block (plan_m = m).
  // Kernels only ever read PlanM(); plan_row0 is the request's, echoed in its answer.
  int64_t plan_m = 0;
  int64_t plan_row0 = 0;

  // The M a launch's kernel choice and K split are made for.
  int64_t PlanM() const { return plan_m > 0 ? plan_m : m; }

  // Row-major leading dimensions of the stored matrices.
  int64_t lda() const { return transpose_a ? m : k; }
  int64_t ldb() const { return transpose_b ? k : n; }
  int64_t ldc() const { return n; }

  int64_t StrideA() const { return batch_stride_a < 0 ? m * k : batch_stride_a; }
  int64_t StrideB() const { return batch_stride_b < 0 ? k * n : batch_stride_b; }
  int64_t StrideCIn() const { return batch_stride_c_in < 0 ? m * n : batch_stride_c_in; }
  int64_t StrideC() const { return batch_stride_c < 0 ? m * n : batch_stride_c; }

  // Elements each operand occupies (the span from the first to the last batch item).
  int64_t ElementsA() const { return SpanElements(StrideA(), m * k); }
  int64_t ElementsB() const { return SpanElements(StrideB(), k * n); }
  int64_t ElementsCIn() const { return SpanElements(StrideCIn(), m * n); }
  int64_t ElementsC() const { return SpanElements(StrideC(), m * n); }

  double Flops() const {
    return 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
           static_cast<double>(k);
  }

 private:
  int64_t SpanElements(int64_t stride, int64_t one) const {
    return batch <= 0 ? 0 : stride * (batch - 1) + one;
  }
};

// Where the operands live (host or device memory, whichever the backend works on).
// c_in may be null when beta == 0; c_out may equal c_in (in place).
struct GemmOperands {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c_in = nullptr;
  void* c_out = nullptr;
};

}  // namespace gemmd

#endif  // GEMMD_KERNELS_GEMM_PROBLEM_H_
