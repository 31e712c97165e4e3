#include "kernels/reference_gemm.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/half.h"

namespace gemmd {
namespace {

// Typed loaders so the inner loops do not switch per element. Operands may sit at any
// byte offset (a payload inside a received message), so elements are read with memcpy,
// which compiles to a plain load.
template <typename T>
T LoadAt(const void* p, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
struct LoadF32 {
  static double Get(const void* p, int64_t i) { return LoadAt<float>(p, i); }
};
struct LoadF16 {
  static double Get(const void* p, int64_t i) { return HalfBitsToFloat(LoadAt<uint16_t>(p, i)); }
};
struct LoadBF16 {
  static double Get(const void* p, int64_t i) { return Bf16BitsToFloat(LoadAt<uint16_t>(p, i)); }
};
struct LoadI8 {
  static double Get(const void* p, int64_t i) { return static_cast<const int8_t*>(p)[i]; }
};
struct LoadI32 {
  static double Get(const void* p, int64_t i) { return LoadAt<int32_t>(p, i); }
};

template <typename F>
void DispatchLoader(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32:
      return f(LoadF32{});
    case DataType::kFloat16:
      return f(LoadF16{});
    case DataType::kBFloat16:
      return f(LoadBF16{});
    case DataType::kInt8:
      return f(LoadI8{});
    case DataType::kInt32:
      return f(LoadI32{});
  }
}

const void* Offset(const void* base, DataType type, int64_t elements) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(DataTypeSize(type));
}

template <typename LB>
void RowsWithB(const GemmProblem& p, const void* b, const std::vector<double>& a_rows, int64_t rows,
               double* out) {
  const int64_t n = p.n;
  const int64_t k = p.k;
  for (int64_t r = 0; r < rows; ++r) {
    const double* a_row = a_rows.data() + r * k;
    double* acc = out + r * n;
    if (!p.transpose_b) {  // B is [K, N]: stream rows of B
      for (int64_t j = 0; j < n; ++j) acc[j] = 0.0;
      for (int64_t q = 0; q < k; ++q) {
        const double a = a_row[q];
        const int64_t row = q * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += a * LB::Get(b, row + j);
      }
    } else {  // B is [N, K]: dot products of contiguous rows
      for (int64_t j = 0; j < n; ++j) {
        const int64_t row = j * k;
        double s = 0.0;
        for (int64_t q = 0; q < k; ++q) s += a_row[q] * LB::Get(b, row + q);
        acc[j] = s;
      }
    }
  }
}

}  // namespace

double LoadAsDouble(const void* data, DataType type, int64_t index) {
  double value = 0.0;
  DispatchLoader(type, [&](auto loader) { value = decltype(loader)::Get(data, index); });
  return value;
}

void ReferenceGemmRows(const GemmProblem& p, const GemmOperands& operands, int64_t batch_index,
                       int64_t row_begin, int64_t row_end, double* out) {
  const int64_t rows = row_end - row_begin;
  if (rows <= 0 || p.n <= 0) return;
  const void* a = Offset(operands.a, p.a_type, batch_index * p.StrideA());
  const void* b = Offset(operands.b, p.b_type, batch_index * p.StrideB());

  std::vector<double> a_rows(static_cast<size_t>(rows * p.k));
  DispatchLoader(p.a_type, [&](auto loader) {
    using LA = decltype(loader);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = row_begin + r;
      for (int64_t q = 0; q < p.k; ++q) {
        a_rows[r * p.k + q] = LA::Get(a, p.transpose_a ? q * p.m + i : i * p.k + q);
      }
    }
  });
  DispatchLoader(p.b_type,
                 [&](auto loader) { RowsWithB<decltype(loader)>(p, b, a_rows, rows, out); });

  const bool read_c = p.beta != 0.0f && operands.c_in != nullptr;
  const void* c_in =
      read_c ? Offset(operands.c_in, p.c_type, batch_index * p.StrideCIn()) : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < p.n; ++j) {
      double& v = out[r * p.n + j];
      v *= static_cast<double>(p.alpha);
      if (read_c) {
        v += static_cast<double>(p.beta) * LoadAsDouble(c_in, p.c_type, (row_begin + r) * p.n + j);
      }
    }
  }
}

std::vector<double> ReferenceGemm(const GemmProblem& problem, const GemmOperands& operands) {
  std::vector<double> out(static_cast<size_t>(problem.batch * problem.m * problem.n));
  for (int64_t b = 0; b < problem.batch; ++b) {
    ReferenceGemmRows(problem, operands, b, 0, problem.m, out.data() + b * problem.m * problem.n);
  }
  return out;
}

double RelativeError(const double* ref, const void* actual, DataType type, int64_t count) {
  double diff2 = 0.0;
  double ref2 = 0.0;
  DispatchLoader(type, [&](auto loader) {
    using L = decltype(loader);
    for (int64_t i = 0; i < count; ++i) {
      const double d = L::Get(actual, i) - ref[i];
      diff2 += d * d;
      ref2 += ref[i] * ref[i];
    }
  });
  if (std::isnan(diff2)) return std::numeric_limits<double>::quiet_NaN();
  if (ref2 == 0.0) return diff2 == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff2 / ref2);
}

}  // namespace gemmd
