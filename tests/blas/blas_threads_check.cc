// A program that calls the BLAS GEMM routines from many threads at once, as numpy and
// OpenMP programs do, and checks every result against a long double reference: linked to
// libgemmd_blas.so and no other BLAS (its local calls then come from the libblas.so.3 it
// loads). blas_library_test.py runs it against a server.
//
//   blas_threads_check THREADS CALLS_PER_THREAD [MIN_SIZE MAX_SIZE]
// (M, N and K drawn from [MIN_SIZE, MAX_SIZE], default [40, 160]).
// Exit status 0 when every result is within its tolerance; the first bad element of a
// wrong result is printed.
//   blas_threads_check --bad_arguments
// Makes a dgemm_ call with a bad LDA and a cblas_dgemm call with a bad layout (no XERBLA
// of the program's own, no BLAS loaded globally: the library's own messages), checks that
// C was not touched, and prints "continued".
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/blas/blas_gemm.h"

namespace {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// One random column-major call C = alpha op(A) op(B) + beta C on sub-matrices (ld > rows),
// made through `entry` (0 dgemm_, 1 sgemm_, 2 cblas_dgemm row-major) and checked:
// |C - ref| <= tol * (|alpha| |op(A)| |op(B)| + |beta| |C0|) elementwise.
template <typename T>
bool OneCall(std::mt19937_64& rng, int entry, int thread, int call, int min_size, int max_size) {
  std::uniform_int_distribution<int> size(min_size, max_size), pad(0, 3), coin(0, 1);
  const int m = size(rng), n = size(rng), k = size(rng);
  const bool ta = coin(rng), tb = coin(rng);
  const int rows_a = ta ? k : m, cols_a = ta ? m : k;
  const int rows_b = tb ? n : k, cols_b = tb ? k : n;
  const int lda = rows_a + pad(rng), ldb = rows_b + pad(rng), ldc = m + pad(rng);
  const T alpha = static_cast<T>(0.75), beta = coin(rng) ? static_cast<T>(-0.5) : T{0};
  std::uniform_real_distribution<double> value(-1, 1);
  std::vector<T> a(static_cast<size_t>(lda) * cols_a), b(static_cast<size_t>(ldb) * cols_b);
  std::vector<T> c(static_cast<size_t>(ldc) * n);
  for (T& x : a) x = static_cast<T>(value(rng));
  for (T& x : b) x = static_cast<T>(value(rng));
  for (T& x : c) x = beta == T{0} ? static_cast<T>(NAN) : static_cast<T>(value(rng));
  const std::vector<T> c0 = c;
  const char tra = ta ? 'T' : 'N', trb = tb ? 'T' : 'N';
  if constexpr (sizeof(T) == 8) {
    if (entry == 2) {
      // Row-major C^T = op(B)^T op(A)^T over the same bytes.
      cblas_dgemm(kRowMajor, tb ? kTrans : kNoTrans, ta ? kTrans : kNoTrans, n, m, k, alpha,
                  b.data(), ldb, a.data(), lda, beta, c.data(), ldc);
    } else {
      dgemm_(&tra, &trb, &m, &n, &k, &alpha, a.data(), &lda, b.data(), &ldb, &beta, c.data(), &ldc,
             1, 1);
    }
  } else {
    sgemm_(&tra, &trb, &m, &n, &k, &alpha, a.data(), &lda, b.data(), &ldb, &beta, c.data(), &ldc, 1,
           1);
  }
  const long double tol = sizeof(T) == 8 ? 1e-13L : 1e-5L;
  auto at = [](const std::vector<T>& x, int ld, int r, int col, bool t) {
    return static_cast<long double>(t ? x[static_cast<size_t>(r) * ld + col]
                                      : x[static_cast<size_t>(col) * ld + r]);
  };
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      long double sum = 0, magnitude = 0;
      for (int l = 0; l < k; ++l) {
        const long double p = at(a, lda, i, l, ta) * at(b, ldb, l, j, tb);
        sum += p;
        magnitude += std::fabs(p);
      }
      const size_t ci = static_cast<size_t>(j) * ldc + i;
      long double want = alpha * sum;
      long double bound = std::fabs(alpha) * magnitude;
      if (beta != T{0}) {
        want += beta * static_cast<long double>(c0[ci]);
        bound += std::fabs(beta * static_cast<long double>(c0[ci]));
      }
      const long double got = c[ci];
      if (!(std::fabs(got - want) <= tol * bound + tol)) {
        std::printf(
            "thread %d call %d (entry %d, %c%c m=%d n=%d k=%d): C(%d,%d) = %.17Lg, "
            "want %.17Lg\n",
            thread, call, entry, tra, trb, m, n, k, i, j, got, want);
        return false;
      }
    }
    for (int i = m; i < ldc; ++i) {  // the rows past m belong to the caller
      const size_t ci = static_cast<size_t>(j) * ldc + i;
      if (!(c[ci] == c0[ci] || (std::isnan(c[ci]) && std::isnan(c0[ci])))) {
        std::printf("thread %d call %d: C(%d,%d) outside the sub-matrix was written\n", thread,
                    call, i, j);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int BadArguments() {
  const int m = 4, n = 4, k = 4, bad_lda = 2, ld = 4;
  const double one = 1, zero = 0;
  std::vector<double> a(16, 1.0), b(16, 1.0), c(16, -7.0);
  dgemm_("N", "N", &m, &n, &k, &one, a.data(), &bad_lda, b.data(), &ld, &zero, c.data(), &ld, 1, 1);
  cblas_dgemm(/*layout=*/7, kNoTrans, kNoTrans, m, n, k, 1.0, a.data(), ld, b.data(), ld, 0.0,
              c.data(), ld);
  for (double x : c) {
    if (x != -7.0) {
      std::printf("C was written by a call with a bad argument\n");
      return 1;
    }
  }
  std::printf("continued\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--bad_arguments") return BadArguments();
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: %s THREADS CALLS_PER_THREAD [MIN_SIZE MAX_SIZE]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]), calls = std::atoi(argv[2]);
  const int min_size = argc == 5 ? std::atoi(argv[3]) : 40;
  const int max_size = argc == 5 ? std::atoi(argv[4]) : 160;
  std::atomic<int> bad{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([t, calls, min_size, max_size, &bad] {
      std::mt19937_64 rng(1000 + t);
      for (int i = 0; i < calls; ++i) {
        const int entry = (t + i) % 3;
        const bool ok = entry == 1 ? OneCall<float>(rng, entry, t, i, min_size, max_size)
                                   : OneCall<double>(rng, entry, t, i, min_size, max_size);
        if (!ok) bad.fetch_add(1);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  std::printf("%d calls, %d wrong\n", threads * calls, bad.load());
  return bad.load() == 0 ? 0 : 1;
}
