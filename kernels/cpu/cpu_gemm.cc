#include "kernels/cpu/cpu_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/half.h"
#include "kernels/half_bulk.h"

namespace gemmd {
namespace {

// OpenBLAS's own thread count when the process started: the most a GEMM may use.
int AllBlasThreads() {
  static const int threads = openblas_get_num_threads();
  return threads;
}

// OpenBLAS splits even a small GEMM over all its threads; below this many FLOPs per
// matrix the hand-off and wake-ups cost more than the other cores gain (measured in
// docs/BENCHMARKS.md, "Transport"), so such a GEMM runs on the calling thread alone.
constexpr double kParallelFlops = 16e6;

// Sets OpenBLAS's thread count for the next calls when it differs. The count is global;
// concurrent callers only ever switch it between 1 and AllBlasThreads(), so no thread is
// ever created and each call runs on either count.
void UseBlasThreads(int threads) {
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

bool IsFloatType(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat16 || type == DataType::kBFloat16;
}

// Widens (and for the tensor path, first rounds) `count` elements to FP32.
void ToFloat(const void* src, DataType type, int64_t count, bool round_for_tensor, float* dst) {
  switch (type) {
    case DataType::kFloat32: {
      const float* s = static_cast<const float*>(src);
      if (round_for_tensor) {  // FP32 inputs are rounded to FP16 on the tensor path
        RoundToHalfBulk(s, count, dst);
      } else {
        std::memcpy(dst, s, static_cast<size_t>(count) * sizeof(float));
      }
      return;
    }
    case DataType::kFloat16: {
      HalfToFloatBulk(static_cast<const uint16_t*>(src), count, dst);
      return;
    }
    case DataType::kBFloat16: {
      // Any byte offset (a payload inside a received message): read with memcpy.
      const char* s = static_cast<const char*>(src);
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, s + 2 * i, 2);
        dst[i] = Bf16BitsToFloat(bits);
      }
      return;
    }
    default:
      return;  // rejected by the caller
  }
}

void FromFloat(const float* src, int64_t count, DataType type, void* dst) {
  switch (type) {
    case DataType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = FloatToHalfBits(src[i]);
      return;
    }
    case DataType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = FloatToBf16Bits(src[i]);
      return;
    }
    default:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      return;
  }
}

// An operand as FP32: the caller's memory when it already is, else a converted copy.
class FloatOperand {
 public:
  FloatOperand(const void* data, DataType type, int64_t elements, bool round_for_tensor) {
    if (type == DataType::kFloat32 && !round_for_tensor) {
      data_ = static_cast<const float*>(data);
      return;
    }
    scratch_.resize(static_cast<size_t>(elements));
    ToFloat(data, type, elements, round_for_tensor, scratch_.data());
    data_ = scratch_.data();
  }
  const float* data() const { return data_; }

 private:
  std::vector<float> scratch_;
  const float* data_ = nullptr;
};

// FP64: OpenBLAS cblas_dgemm on the operands where they are, in the same row panels as the
// FP32 path (so a row block of a planned product gets the whole product's bits).
void Dgemm(const GemmProblem& p, const GemmOperands& operands, int64_t panel, bool read_c) {
  const int64_t mn = p.m * p.n;
  for (int64_t item = 0; item < p.batch; ++item) {
    double* c = static_cast<double*>(operands.c_out) + item * p.StrideC();
    if (read_c) {
      const double* c_in = static_cast<const double*>(operands.c_in) + item * p.StrideCIn();
      if (c_in != c) std::memcpy(c, c_in, static_cast<size_t>(mn) * sizeof(double));
    }
    const auto gemm = [&](double alpha, double beta, double* out) {
      for (int64_t r = 0; r < p.m; r += panel) {
        const int64_t rows = std::min(panel, p.m - r);
        const double* a = static_cast<const double*>(operands.a) + item * p.StrideA() +
                          (p.transpose_a ? r : r * p.k);
        cblas_dgemm(CblasRowMajor, p.transpose_a ? CblasTrans : CblasNoTrans,
                    p.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                    static_cast<int>(p.n), static_cast<int>(p.k), alpha, a,
                    static_cast<int>(p.lda()),
                    static_cast<const double*>(operands.b) + item * p.StrideB(),
                    static_cast<int>(p.ldb()), beta, out + r * p.n, static_cast<int>(p.ldc()));
      }
    };
    if (p.alpha != 0.0) {
      gemm(p.alpha, read_c ? p.beta : 0.0, c);
    } else {  // as the FP32 path: op(A)op(B) is always evaluated, NaNs included
      std::vector<double> product(static_cast<size_t>(mn));
      gemm(1.0, 0.0, product.data());
      for (int64_t i = 0; i < mn; ++i) c[i] = 0.0 * product[i] + (read_c ? p.beta * c[i] : 0.0);
    }
  }
}

}  // namespace

void WidenToFloat(const void* src, DataType type, int64_t count, float* dst) {
  ToFloat(src, type, count, /*round_for_tensor=*/false, dst);
}

absl::Status CpuGemm(const GemmProblem& p, const GemmOperands& operands) {
  const bool fp64 = p.precision == Precision::kFp64;
  const bool types_ok =
      fp64 ? p.a_type == DataType::kFloat64 && p.b_type == DataType::kFloat64 &&
                 p.c_type == DataType::kFloat64
           : IsFloatType(p.a_type) && IsFloatType(p.b_type) && IsFloatType(p.c_type);
  if (!types_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU GEMM supports FLOAT32/FLOAT16/BFLOAT16 operands, or FLOAT64 ones (all three) for "
        "FP64; got a=",
        DataTypeName(p.a_type), " b=", DataTypeName(p.b_type), " c=", DataTypeName(p.c_type),
        " for ", PrecisionName(p.precision)));
  }
  constexpr int64_t kMaxDim = std::numeric_limits<int>::max();
  if (p.m > kMaxDim || p.n > kMaxDim || p.k > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dimensions [", p.m, ",", p.n, ",", p.k, "] exceed the CPU backend's 32-bit BLAS indices"));
  }
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0 || p.k <= 0) {
    return absl::InvalidArgumentError("batch, m, n and k must be positive");
  }
  const bool read_c = p.beta != 0.0;
  if (read_c && operands.c_in == nullptr) {
    return absl::InvalidArgumentError("beta != 0 needs a C input");
  }

  // Rows [r, r + panel) of every item are one BLAS call (kRowPlanAlign), and the threads
  // are chosen for a full panel of the planned product (GemmProblem::PlanM), so a row block
  // of a planned product, its short last one included, gets the whole product's.
  const int64_t panel = std::min(p.PlanM(), kRowPlanAlign);
  const double panel_flops =
      2.0 * static_cast<double>(panel) * static_cast<double>(p.n) * static_cast<double>(p.k);
  UseBlasThreads(panel_flops < kParallelFlops ? 1 : AllBlasThreads());
  if (fp64) {
    Dgemm(p, operands, panel, read_c);
    return absl::OkStatus();
  }
  const float alpha = static_cast<float>(p.alpha);
  const float beta = static_cast<float>(p.beta);
  const bool tensor = p.precision == Precision::kFp16Tensor;
  // BF16 inputs keep BF16 on the tensor path, which widens exactly, so only FP32 rounds.
  const FloatOperand a(operands.a, p.a_type, p.ElementsA(),
                       tensor && TensorOperandType(p.a_type) == DataType::kFloat16);
  const FloatOperand b(operands.b, p.b_type, p.ElementsB(),
                       tensor && TensorOperandType(p.b_type) == DataType::kFloat16);

  const int64_t mn = p.m * p.n;
  const size_t c_elem = DataTypeSize(p.c_type);
  const bool c_is_float = p.c_type == DataType::kFloat32;
  std::vector<float> c_scratch(c_is_float ? 0 : static_cast<size_t>(mn));

  for (int64_t item = 0; item < p.batch; ++item) {
    float* c =
        c_is_float ? static_cast<float*>(operands.c_out) + item * p.StrideC() : c_scratch.data();
    if (read_c) {
      const char* c_in = static_cast<const char*>(operands.c_in) +
                         item * p.StrideCIn() * static_cast<int64_t>(c_elem);
      if (c_is_float) {
        if (c_in != reinterpret_cast<const char*>(c)) {
          std::memcpy(c, c_in, static_cast<size_t>(mn) * sizeof(float));
        }
      } else {
        ToFloat(c_in, p.c_type, mn, /*round_for_tensor=*/false, c);
      }
    }
    // With beta == 0 BLAS overwrites C without reading it, so stale contents (even NaN)
    // never leak through; the NaN-poisoned tests hold it to that.
    const auto gemm = [&](float alpha, float beta, float* out) {
      for (int64_t r = 0; r < p.m; r += panel) {
        const int64_t rows = std::min(panel, p.m - r);
        // Row r of op(A): column r of a transposed A (lda stays M), else row r.
        const float* a_panel = a.data() + item * p.StrideA() + (p.transpose_a ? r : r * p.k);
        cblas_sgemm(CblasRowMajor, p.transpose_a ? CblasTrans : CblasNoTrans,
                    p.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                    static_cast<int>(p.n), static_cast<int>(p.k), alpha, a_panel,
                    static_cast<int>(p.lda()), b.data() + item * p.StrideB(),
                    static_cast<int>(p.ldb()), beta, out + r * p.n, static_cast<int>(p.ldc()));
      }
    };
    if (alpha != 0.0f) {
      gemm(alpha, read_c ? beta : 0.0f, c);
    } else {
      // OpenBLAS skips op(A)op(B) when alpha is 0 on some paths (then NaNs in A or B vanish)
      // and not on others (then 0 * NaN is NaN): evaluate it always, as the GPU kernels do,
      // so one request gives one answer whatever its size or backend.
      std::vector<float> product(static_cast<size_t>(mn));
      gemm(1.0f, 0.0f, product.data());
      for (int64_t i = 0; i < mn; ++i) {
        c[i] = 0.0f * product[i] + (read_c ? beta * c[i] : 0.0f);
      }
    }
    if (!c_is_float) {
      FromFloat(
          c, mn, p.c_type,
          static_cast<char*>(operands.c_out) + item * p.StrideC() * static_cast<int64_t>(c_elem));
    }
  }
  return absl::OkStatus();
}

int CpuGemmThreads() { return AllBlasThreads(); }

}  // namespace gemmd
