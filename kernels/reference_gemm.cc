#include "kernels/reference_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

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
struct LoadF64 {
  static double Get(const void* p, int64_t i) { return LoadAt<double>(p, i); }
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
    case DataType::kFloat64:
      return f(LoadF64{});
  }
}

const void* Offset(const void* base, DataType type, int64_t elements) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(DataTypeSize(type));
}

// out[r, j] = alpha * (a_rows[r, :] . op(B)[:, j]) + beta * C_in[row_begin + r, j], summed
// and scaled in Acc and rounded to double once.
template <typename LB, typename Acc>
void RowsWithB(const GemmProblem& p, const void* b, const std::vector<double>& a_rows, int64_t rows,
               const void* c_in, int64_t row_begin, double* out) {
  const int64_t n = p.n;
  const int64_t k = p.k;
  std::vector<Acc> acc(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const double* a_row = a_rows.data() + r * k;
    if (!p.transpose_b) {  // B is [K, N]: stream rows of B
      for (int64_t j = 0; j < n; ++j) acc[j] = 0;
      for (int64_t q = 0; q < k; ++q) {
        const Acc a = a_row[q];
        const int64_t row = q * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += a * static_cast<Acc>(LB::Get(b, row + j));
      }
    } else {  // B is [N, K]: dot products of contiguous rows
      for (int64_t j = 0; j < n; ++j) {
        const int64_t row = j * k;
        Acc s = 0;
        for (int64_t q = 0; q < k; ++q) s += a_row[q] * static_cast<Acc>(LB::Get(b, row + q));
        acc[j] = s;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      Acc v = static_cast<Acc>(p.alpha) * acc[j];
      if (c_in != nullptr) {
        v += static_cast<Acc>(p.beta) *
             static_cast<Acc>(LoadAsDouble(c_in, p.c_type, (row_begin + r) * n + j));
      }
      out[r * n + j] = static_cast<double>(v);
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
  const bool read_c = p.beta != 0.0 && operands.c_in != nullptr;
  const void* c_in =
      read_c ? Offset(operands.c_in, p.c_type, batch_index * p.StrideCIn()) : nullptr;
  // FP64 operands would lose as much to a double accumulator as the kernel under test
  // does: sum them in long double (x86's 64-bit significand, 11 bits more).
  const bool wide = p.a_type == DataType::kFloat64 || p.b_type == DataType::kFloat64;
  DispatchLoader(p.b_type, [&](auto loader) {
    if (wide) {
      RowsWithB<decltype(loader), long double>(p, b, a_rows, rows, c_in, row_begin, out);
    } else {
      RowsWithB<decltype(loader), double>(p, b, a_rows, rows, c_in, row_begin, out);
    }
  });
}

std::vector<double> ReferenceGemm(const GemmProblem& problem, const GemmOperands& operands) {
  const int64_t m = problem.m, n = problem.n;
  std::vector<double> out(static_cast<size_t>(problem.batch * m * n));
  if (problem.batch <= 0 || m <= 0 || n <= 0) return out;
  // Rows are independent, so large problems take blocks of rows on several threads (the
  // same sums as one thread's): a GPU test's reference of a few 1e9 multiply-adds took
  // seconds a case on one core. Small problems stay on the caller's thread.
  constexpr int64_t kWorkAThread = int64_t{1} << 24;  // multiply-adds
  const int64_t work = problem.batch * m * n * std::max<int64_t>(problem.k, 1);
  const int64_t threads = std::clamp<int64_t>(
      std::min<int64_t>(work / kWorkAThread, std::thread::hardware_concurrency()), 1, 16);
  const int64_t blocks_an_item = threads == 1 ? 1 : std::min<int64_t>(m, threads * 4);
  const int64_t tasks = problem.batch * blocks_an_item;
  const auto run = [&](int64_t task) {
    const int64_t b = task / blocks_an_item, block = task % blocks_an_item;
    const int64_t begin = block * m / blocks_an_item, end = (block + 1) * m / blocks_an_item;
    ReferenceGemmRows(problem, operands, b, begin, end, out.data() + (b * m + begin) * n);
  };
  if (threads == 1) {
    for (int64_t task = 0; task < tasks; ++task) run(task);
    return out;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int64_t task = next++; task < tasks; task = next++) run(task);
    });
  }
  for (std::thread& th : pool) th.join();
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
