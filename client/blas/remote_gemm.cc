#include "client/blas/remote_gemm.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/blas/settings.h"

namespace gemmd::blas {
namespace {

// A column-major rows x cols sub-matrix with leading dimension ld, as the row-major
// [cols, rows] tensor its bytes are: referenced when its columns are contiguous, else
// copied into `packed`.
TensorRef RowMajorView(const void* data, int64_t rows, int64_t cols, int64_t ld,
                       int64_t element_bytes, gemm::v1::DataType dtype,
                       std::unique_ptr<char[]>* packed) {
  TensorRef t;
  t.shape = {cols, rows};
  t.dtype = dtype;
  const int64_t row_bytes = rows * element_bytes;
  const char* bytes = static_cast<const char*>(data);
  if (ld == rows || cols == 1) {
    t.data = absl::string_view(bytes, row_bytes * cols);
    return t;
  }
  packed->reset(new char[row_bytes * cols]);
  for (int64_t j = 0; j < cols; ++j) {
    std::memcpy(packed->get() + j * row_bytes, bytes + j * ld * element_bytes, row_bytes);
  }
  t.data = absl::string_view(packed->get(), row_bytes * cols);
  return t;
}

template <typename T>
void MergeInto(const T* result, const GemmCall& call) {
  T* c = static_cast<T*>(call.c);
  const T beta = static_cast<T>(call.beta);
  for (int64_t j = 0; j < call.n; ++j) {
    const T* r = result + j * call.m;
    T* col = c + j * call.ldc;
    if (call.beta == 0) {
      std::memcpy(col, r, call.m * sizeof(T));  // beta = 0: C is not read (NaN stays out)
    } else {
      for (int64_t i = 0; i < call.m; ++i) col[i] = r[i] + beta * col[i];
    }
  }
}

constexpr int64_t kSliceAlignment = 4096;  // each staged tensor starts on a page

int64_t AlignUp(int64_t n) { return (n + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment; }

int CopyThreads() {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency() / 2, 1, 8));
}

// `t`'s bytes (a RowMajorView, packed or not) copied to `at` in the region, `t` then
// naming that slice.
void StageTensor(const ShmStaging::Lease& region, int64_t at, TensorRef* t) {
  ParallelCopy(region.data() + at, t->data.data(), static_cast<int64_t>(t->data.size()),
               CopyThreads());
  t->shm = {region.name(), at, static_cast<int64_t>(t->data.size())};
  t->data = absl::string_view();
}

}  // namespace

int64_t StagedBytes(const GemmCall& call) {
  const int64_t es = ElementBytes(call.element);
  return AlignUp(call.n * call.k * es) + AlignUp(call.k * call.m * es) + call.m * call.n * es;
}

void BuildMatmul(const GemmCall& call, RemoteOperands* out) {
  const bool f64 = call.element == Element::kFloat64;
  const gemm::v1::DataType dtype = f64 ? gemm::v1::DATA_TYPE_FLOAT64 : gemm::v1::DATA_TYPE_FLOAT32;
  const int64_t es = ElementBytes(call.element);
  MatmulArgs& args = out->args;
  // The server's A is op(B)^T [n, k]: B's bytes, transposed when op(B) is not.
  const int64_t rows_b = call.transpose_b ? call.n : call.k;
  const int64_t cols_b = call.transpose_b ? call.k : call.n;
  args.a = RowMajorView(call.b, rows_b, cols_b, call.ldb, es, dtype, &out->packed_a);
  args.transpose_a = call.transpose_b;
  // Its B is op(A)^T [k, m]: A's bytes, likewise.
  const int64_t rows_a = call.transpose_a ? call.k : call.m;
  const int64_t cols_a = call.transpose_a ? call.m : call.k;
  args.b = RowMajorView(call.a, rows_a, cols_a, call.lda, es, dtype, &out->packed_b);
  args.transpose_b = call.transpose_a;
  args.alpha = call.alpha;
  args.beta = 0.0;
  args.precision = f64 ? gemm::v1::PRECISION_FP64 : gemm::v1::PRECISION_FP32;
  args.output_dtype = dtype;
}

absl::Status RunRemote(GemmClient& client, const GemmCall& call, absl::Duration timeout,
                       int stripes, const ShmStaging::Lease* region) {
  RemoteOperands operands;
  BuildMatmul(call, &operands);
  const int64_t c_bytes = call.m * call.n * ElementBytes(call.element);
  if (region != nullptr) {
    const int64_t b_at = AlignUp(static_cast<int64_t>(operands.args.a.data.size()));
    const int64_t c_at = b_at + AlignUp(static_cast<int64_t>(operands.args.b.data.size()));
    StageTensor(*region, 0, &operands.args.a);
    StageTensor(*region, b_at, &operands.args.b);
    operands.args.c_shm = {region->name(), c_at, c_bytes};
    CallOptions options;
    options.timeout = timeout;
    MatmulResult result;
    if (absl::Status s = client.Matmul(operands.args, options, &result); !s.ok()) return s;
    const char* c = region->data() + c_at;
    if (call.beta == 0 && (call.ldc == call.m || call.n == 1)) {
      ParallelCopy(static_cast<char*>(call.c), c, c_bytes, CopyThreads());
    } else if (call.element == Element::kFloat64) {
      MergeInto(reinterpret_cast<const double*>(c), call);
    } else {
      MergeInto(reinterpret_cast<const float*>(c), call);
    }
    return absl::OkStatus();
  }
  const bool in_place = call.beta == 0 && (call.ldc == call.m || call.n == 1);
  std::unique_ptr<char[]> staging;
  if (!in_place) staging.reset(new char[c_bytes]);
  CallOptions options;
  options.timeout = timeout;
  if (stripes < 0) {
    const int64_t es = ElementBytes(call.element);
    const int64_t moved = (call.m * call.k + call.k * call.n + call.m * call.n) * es;
    stripes = moved >= kAutoStripeBytes ? kAutoStripes : 1;
  }
  options.stripes = stripes;
  options.c_out = absl::Span<char>(in_place ? static_cast<char*>(call.c) : staging.get(),
                                   static_cast<size_t>(c_bytes));
  MatmulResult result;
  absl::Status status = client.Matmul(operands.args, options, &result);
  if (!status.ok()) return status;
  if (static_cast<int64_t>(result.c().size()) != c_bytes) {
    return absl::InternalError(absl::StrCat("the server answered ", result.c().size(),
                                            " bytes of C where ", c_bytes, " were due"));
  }
  if (!in_place) {
    if (call.element == Element::kFloat64) {
      MergeInto(reinterpret_cast<const double*>(staging.get()), call);
    } else {
      MergeInto(reinterpret_cast<const float*>(staging.get()), call);
    }
  }
  return absl::OkStatus();
}

}  // namespace gemmd::blas
