// An ordinary BLAS program, for bench/blas_offload.sh: linked to the system's libblas.so.3
// and nothing of gemmd's (blas_gemm.h only declares the standard routines), it times square
// column-major xGEMM calls (C = A B, beta 0), so the same binary measures the host's BLAS as it is
// and, under LD_PRELOAD=libgemmd_blas.so, the calls sent to a server.
//
//   blas-offload-bench [--dtype d|s] [--reps R] N...
// One line per N: seconds per call (best and median of R after one warm-up call), GFLOP/s
// at the median, and the worst relative error of 64 sampled elements of C against a long
// double dot product (a wrong C shows there, wherever it was computed).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/blas/blas_gemm.h"

namespace {

void Gemm(int n, const double* a, const double* b, double* c) {
  const double one = 1, zero = 0;
  dgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
}
void Gemm(int n, const float* a, const float* b, float* c) {
  const float one = 1, zero = 0;
  sgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
}

template <typename T>
void Bench(int n, int reps) {
  const size_t count = static_cast<size_t>(n) * n;
  std::vector<T> a(count), b(count), c(count);
  std::mt19937_64 rng(n);
  std::uniform_real_distribution<double> value(-1, 1);
  for (T& x : a) x = static_cast<T>(value(rng));
  for (T& x : b) x = static_cast<T>(value(rng));
  Gemm(n, a.data(), b.data(), c.data());  // warm-up: threads, connections, first touches
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    std::fill(c.begin(), c.end(), T{0});
    const auto start = std::chrono::steady_clock::now();
    Gemm(n, a.data(), b.data(), c.data());
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  double worst = 0;
  std::uniform_int_distribution<int> index(0, n - 1);
  for (int s = 0; s < 64; ++s) {
    const int i = index(rng), j = index(rng);
    long double sum = 0, magnitude = 0;
    for (int l = 0; l < n; ++l) {
      const long double p = static_cast<long double>(a[static_cast<size_t>(l) * n + i]) *
                            b[static_cast<size_t>(j) * n + l];
      sum += p;
      magnitude += std::fabs(p);
    }
    worst = std::max<double>(worst, std::fabs(c[static_cast<size_t>(j) * n + i] - sum) / magnitude);
  }
  std::printf("%s n=%d best_s=%.6f median_s=%.6f gflops=%.1f max_rel_error=%.2e\n",
              sizeof(T) == 8 ? "dgemm" : "sgemm", n, seconds.front(), median,
              2.0 * n * n * static_cast<double>(n) / median / 1e9, worst);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype = "d";
  int reps = 5;
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dtype" && i + 1 < argc) {
      dtype = argv[++i];
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s [--dtype d|s] [--reps R] N...\n", argv[0]);
      return 0;
    } else if (std::atoi(arg.c_str()) > 0) {
      sizes.push_back(std::atoi(arg.c_str()));
    } else {
      std::fprintf(stderr, "%s: not a size or flag: %s\n", argv[0], arg.c_str());
      return 2;
    }
  }
  if (sizes.empty() || reps < 1 || (dtype != "d" && dtype != "s")) {
    std::fprintf(stderr, "usage: %s [--dtype d|s] [--reps R] N...\n", argv[0]);
    return 2;
  }
  for (int n : sizes) dtype == "d" ? Bench<double>(n, reps) : Bench<float>(n, reps);
  return 0;
}
