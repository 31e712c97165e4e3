#include "client/blas/remote_gemm.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/blas/settings.h"

namespace gemmd::blas {
namespace {

int CopyThreads() {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency() / 2, 1, 8));
}

// A column-major rows x cols sub-matrix with leading dimension ld, as the row-major
// [cols, rows] tensor its bytes are: copied to `into` when given (a region's slice), else
// referenced when its columns are contiguous and copied into `packed` when not.
TensorRef RowMajorView(const void* data, int64_t rows, int64_t cols, int64_t ld,
                       int64_t element_bytes, gemm::v1::DataType dtype,
                       std::unique_ptr<char[]>* packed, char* into) {
  TensorRef t;
  t.shape = {cols, rows};
  t.dtype = dtype;
  const int64_t row_bytes = rows * element_bytes;
  const char* bytes = static_cast<const char*>(data);
  const bool contiguous = ld == rows || cols == 1;
  if (contiguous && into == nullptr) {
    t.data = absl::string_view(bytes, row_bytes * cols);
    return t;
  }
  if (into == nullptr) {
    packed->reset(new char[row_bytes * cols]);
    into = packed->get();
  }
  if (contiguous) {
    ParallelCopy(into, bytes, row_bytes * cols, CopyThreads());
  } else {
    for (int64_t j = 0; j < cols; ++j) {
      std::memcpy(into + j * row_bytes, bytes + j * ld * element_bytes, row_bytes);
    }
  }
  t.data = absl::string_view(into, row_bytes * cols);
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

// Where the server's B and C start in a call's staged region (its A at 0).
struct StagedLayout {
  int64_t b_at, c_at, end;
};
StagedLayout LayoutOf(const GemmCall& call) {
  const int64_t es = ElementBytes(call.element);
  const int64_t b_at = AlignUp(call.n * call.k * es);
  const int64_t c_at = b_at + AlignUp(call.k * call.m * es);
  return {b_at, c_at, c_at + call.m * call.n * es};
}

}  // namespace

int64_t StagedBytes(const GemmCall& call) { return LayoutOf(call).end; }

void BuildMatmul(const GemmCall& call, RemoteOperands* out, char* a_into, char* b_into) {
  const bool f64 = call.element == Element::kFloat64;
  const gemm::v1::DataType dtype = f64 ? gemm::v1::DATA_TYPE_FLOAT64 : gemm::v1::DATA_TYPE_FLOAT32;
  const int64_t es = ElementBytes(call.element);
  MatmulArgs& args = out->args;
  // The server's A is op(B)^T [n, k]: B's bytes, transposed when op(B) is not.
  const int64_t rows_b = call.transpose_b ? call.n : call.k;
  const int64_t cols_b = call.transpose_b ? call.k : call.n;
  args.a = RowMajorView(call.b, rows_b, cols_b, call.ldb, es, dtype, &out->packed_a, a_into);
  args.transpose_a = call.transpose_b;
  // Its B is op(A)^T [k, m]: A's bytes, likewise.
  const int64_t rows_a = call.transpose_a ? call.k : call.m;
  const int64_t cols_a = call.transpose_a ? call.m : call.k;
  args.b = RowMajorView(call.a, rows_a, cols_a, call.lda, es, dtype, &out->packed_b, b_into);
  args.transpose_b = call.transpose_a;
  args.alpha = call.alpha;
  args.beta = 0.0;
  args.precision = f64 ? gemm::v1::PRECISION_FP64 : gemm::v1::PRECISION_FP32;
  args.output_dtype = dtype;
}

absl::Status RunRemote(GemmClient& client, const GemmCall& call, absl::Duration timeout,
                       int stripes, const ShmStaging::Lease* region) {
  const int64_t c_bytes = call.m * call.n * ElementBytes(call.element);
  // C lands in the caller's array when it is contiguous and beta = 0, else where `merge`
  // points, to be merged as C = result + beta * C.
  const bool in_place = call.beta == 0 && (call.ldc == call.m || call.n == 1);
  RemoteOperands operands;
  CallOptions options;
  options.timeout = timeout;
  std::unique_ptr<char[]> staging;
  const char* merge = nullptr;
  if (region != nullptr) {
    // A and B copied (or packed) straight into the region; the server writes C there.
    const StagedLayout at = LayoutOf(call);
    BuildMatmul(call, &operands, region->data(), region->data() + at.b_at);
    auto in_region = [region](TensorRef* t, int64_t offset) {
      t->shm = {region->name(), offset, static_cast<int64_t>(t->data.size())};
      t->data = absl::string_view();
    };
    in_region(&operands.args.a, 0);
    in_region(&operands.args.b, at.b_at);
    operands.args.c_shm = {region->name(), at.c_at, c_bytes};
    merge = region->data() + at.c_at;
  } else {
    BuildMatmul(call, &operands);
    if (stripes < 0) {
      const int64_t es = ElementBytes(call.element);
      const int64_t moved = (call.m * call.k + call.k * call.n + call.m * call.n) * es;
      stripes = moved >= kAutoStripeBytes ? kAutoStripes : 1;
    }
    options.stripes = stripes;
    if (!in_place) {
      staging.reset(new char[c_bytes]);
      merge = staging.get();
    }
    options.c_out = absl::Span<char>(in_place ? static_cast<char*>(call.c) : staging.get(),
                                     static_cast<size_t>(c_bytes));
  }
  MatmulResult result;
  absl::Status status = client.Matmul(operands.args, options, &result);
  if (!status.ok()) return status;
  if (region == nullptr && static_cast<int64_t>(result.c().size()) != c_bytes) {
    return absl::InternalError(absl::StrCat("the server answered ", result.c().size(),
                                            " bytes of C where ", c_bytes, " were due"));
  }
  if (in_place && region != nullptr) {
    ParallelCopy(static_cast<char*>(call.c), merge, c_bytes, CopyThreads());
  } else if (!in_place) {
    if (call.element == Element::kFloat64) {
      MergeInto(reinterpret_cast<const double*>(merge), call);
    } else {
      MergeInto(reinterpret_cast<const float*>(merge), call);
    }
  }
  return absl::OkStatus();
}

}  // namespace gemmd::blas
