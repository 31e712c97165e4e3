// gemm-bench: times every registered GPU kernel variant and cuBLAS on the same inputs in
// one run (docs/ARCHITECTURE.md, "Measuring") and checks each result against the FP64 CPU
// reference.
//
//   gemm-bench [--csv[=FILE]] [--json[=FILE]] [--iters=N] [--warmup=N] [--filter=SUBSTR]
//              [--kernels=SUBSTR|auto] [--seed=S] [--device=D] [--no-check] [--paired]
//              [--with-copies]
//              [--quantized]
//
// --filter takes comma-separated substrings of "group shape path", e.g.
// --filter='square 4096x4096x4096 FP32,batched' ; --kernels=auto times only the
// variant SelectKernel picks (plus cuBLAS).
//
// Workloads: square 1024/2048/4096/8192 (FP32; FP64; FP16_TENSOR with FP16 inputs; at 4096 and
// 8192 also FP32 and BF16 inputs on the tensor path), skinny M in {1,16,64} with
// N = K = 8192, batched 64 x 256^3 and 1024 x 64^3. cuBLAS yardsticks: cublasSgemm with
// the default math mode (no TF32) for FP32; cublasDgemm for FP64; cublasGemmEx FP16 (or BF16) in,
// FP32 out, FP32 compute (tensor ops) for the tensor path, on the same operands (FP16 copies for
// FP32 inputs: cuBLAS is not charged the conversion, our kernels are); strided-batched
// versions for batches.
//
// Method: fresh uniform(-1,1) data per workload (never zeros), generated on the device;
// inputs rotated over several buffer sets when a set is smaller than 3x L2; warm-up
// launches first; then each timed launch between its own pair of CUDA events, with the
// host never waiting inside the loop (so launch gaps stay out); the median of --iters
// (>= 10) is reported. --paired times cuBLAS again for each variant, alternating launch by
// launch with it, and rates the variant against that (the column "cuBLAS TFLOP/s" is then
// per row): a long run at full FP64 tensor load lowers the clocks, so a variant timed after
// others would otherwise meet a hotter GPU than the cuBLAS run timed first.
// Rel. error = ||C - C_ref||_F / ||C_ref||_F against FP64 on the stored operands, over all
// of C for small problems and over sampled rows (and batch items) for big ones.
//
// --with-copies also times, for each workload's selected kernel, what an in-process
// caller holding its operands in host memory pays: cudaMemcpy A and B in, the launch,
// cudaMemcpy C out (wall clock, median of --iters), from ordinary (pageable) host memory
// and from pinned memory. That is the yardstick for the server's copy_in + compute +
// copy_out (its operands arrive in pageable request buffers).
//
// --quantized times only the quantized kernels: the skinny weight-only GEMM (FP16
// activations, INT8 or NVFP4 weight, M in {1, 16, 64} or --skinny-m, N = K = 8192 or
// --skinny-shapes; with FP16 A also the swap-AB kernel on the swap-AB layouts)
// against cuBLAS FP16 (cublasGemmEx FP16 in, FP32 out) on the same shape, with the bytes
// each moves per call as a share of the 4.1 TB/s the H200 copies device to device
// (docs/ARCHITECTURE.md, "Measuring"). Weights are quantized on the host from uniform(-1,1) data
// and rotated over enough copies to stay out of L2; the error is checked on two rows of C against
// FP64 on the dequantized weight. NVFP4 rows past M = 16 also time the square FP16 x
// NVFP4 kernel on the same operands (the server's choice there until 2026-12-01, and
// still past 64 rows). --skinny-a=bfloat16 gives our kernel BF16 activations instead
// (cuBLAS stays FP16).
//
// --quantized-square[=S,...] (default 4096) times the square quantized kernels
// (quant_square.h) at S^3, TN layout (A [M,K], B [N,K]): INT8 x INT8 (the wgmma kernel
// where available, and the mma.sync one) against cuBLAS cublasGemmEx 8I -> 32I
// (COMPUTE_32I); NVFP4 x NVFP4, FP16 x NVFP4 and FP16 x INT8 (the canonical kernels,
// and the swap-AB kernel on the swap-AB layouts with its knobs) against cuBLAS FP16 and
// our FP16 path (the kernel SelectKernel picks for FP16 TN), all on operands quantized on
// the host from the same uniform(-1,1) data; error on 4 rows of C against FP64 on the
// dequantized operands.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/quantized/nvfp4_expand.h"
#include "kernels/cuda/quantized/quant_gemm.h"
#include "kernels/cuda/quantized/quant_square.h"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/cuda/quantized/quantized_kernels.h"
#include "kernels/gemm_problem.h"
#include "kernels/half.h"
#include "kernels/quant_formats.h"
#include "kernels/quant_prepack.h"
#include "kernels/reference_gemm.h"

namespace {

using gemmd::DataType;
using gemmd::GemmOperands;
using gemmd::GemmProblem;
using gemmd::Precision;
using gemmd::gpu::DeviceCaps;
using gemmd::gpu::GpuGemmKernel;
using gemmd::gpu::KernelRegistry;

#define CHECK_CUDA(expr)                                                              \
  do {                                                                                \
    const cudaError_t e_ = (expr);                                                    \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #expr, __FILE__, __LINE__, \
                   cudaGetErrorString(e_));                                           \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

#define CHECK_CUBLAS(expr)                                                          \
  do {                                                                              \
    const cublasStatus_t s_ = (expr);                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                              \
      std::fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", static_cast<int>(s_),  \
                   __FILE__, __LINE__, #expr);                                      \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

// ---- device data ---------------------------------------------------------------------

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1): 24 random bits, so FP32 values are exact.
template <typename T>
__global__ void FillUniform(T* out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t r = SplitMix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    const float v = static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
    out[i] = gemmd::gpu::internal::FromFloat<T>(v);
  }
}

// FP64 operands: uniform(-1, 1) with all 53 bits of the significand drawn.
__global__ void FillUniform64(double* out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t r = SplitMix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    out[i] = static_cast<double>(r >> 11) * 0x1p-52 - 1.0;
  }
}

__global__ void FloatToHalf(const float* in, __half* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2half_rn(in[i]);
  }
}

unsigned Blocks(int64_t count) {
  return static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 65536));
}

void Fill(DataType type, void* ptr, int64_t count, uint64_t seed) {
  if (type == DataType::kFloat32) {
    FillUniform<float><<<Blocks(count), 256>>>(static_cast<float*>(ptr), count, seed);
  } else if (type == DataType::kFloat64) {
    FillUniform64<<<Blocks(count), 256>>>(static_cast<double*>(ptr), count, seed);
  } else if (type == DataType::kFloat16) {
    FillUniform<__half><<<Blocks(count), 256>>>(static_cast<__half*>(ptr), count, seed);
  } else {
    FillUniform<__nv_bfloat16><<<Blocks(count), 256>>>(static_cast<__nv_bfloat16*>(ptr),
                                                        count, seed);
  }
  CHECK_CUDA(cudaGetLastError());
}

struct DevMem {
  void* p = nullptr;
  DevMem() = default;
  explicit DevMem(size_t bytes) { CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  DevMem(DevMem&& o) noexcept : p(o.p) { o.p = nullptr; }
  ~DevMem() {
    if (p) cudaFree(p);
  }
};

// ---- options ---------------------------------------------------------------------------

struct Options {
  bool csv = false;
  bool json = false;
  std::string csv_file;
  std::string json_file;
  int iters = 20;
  int warmup = 3;
  std::string filter;
  std::string kernels;  // substring of variant names; "auto" = only the selected one
  uint64_t seed = 20261130;
  int device = 0;
  bool check = true;
  bool paired = false;
  bool with_copies = false;
  bool quantized = false;
  std::vector<int64_t> square_sizes;  // --quantized-square[=S,...]; empty: not run
  std::vector<int64_t> skinny_m = {1, 16, 64};  // --skinny-m=M,...
  // --skinny-shapes=NxK,...: the weights' shapes (an MLP's up and down projections are
  // 28672x8192 and 8192x28672).
  std::vector<std::pair<int64_t, int64_t>> skinny_shapes = {{8192, 8192}};
  std::vector<std::string> skinny_formats = {"nvfp4", "int8"};  // --skinny-formats=...
  // --swapab-l2-ahead=N: the mma.sync swap-AB kernel also with L2 requests N turns ahead.
  int swapab_l2_ahead = 0;
  int swapab_rows = 0;    // --swapab-rows=128|256: the wgmma swap-AB kernel's rows a block
  int swapab_splits = 0;  // --swapab-splits=1|2|4|8: its K split (0: chosen)
  // --swapab-warpgroups=4: also its 256-row blocks of four warpgroups (4 K tiles a stage)
  int swapab_warpgroups = 0;
  // --swapab-band=128: also the wgmma kernel on bands of 128 rows (each 128-row slab
  // prepacked alone), 128 rows a block: one copy of codes and one of scales a stage.
  int swapab_band = 0;
  DataType skinny_a = DataType::kFloat16;       // --skinny-a=float16|bfloat16
  gemmd::gpu::SkinnyQuantizedTuning skinny;  // --skinny-k-splits, --skinny-stages, --skinny-path
};

bool Flag(const std::string& arg, const char* name, std::string* value) {
  const std::string n = name;
  if (arg == n) {
    *value = "";
    return true;
  }
  if (arg.rfind(n + "=", 0) == 0) {
    *value = arg.substr(n.size() + 1);
    return true;
  }
  return false;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string v;
    if (Flag(arg, "--csv", &v)) {
      o.csv = true;
      o.csv_file = v;
    } else if (Flag(arg, "--json", &v)) {
      o.json = true;
      o.json_file = v;
    } else if (Flag(arg, "--iters", &v)) {
      o.iters = std::max(10, std::atoi(v.c_str()));
    } else if (Flag(arg, "--warmup", &v)) {
      o.warmup = std::max(1, std::atoi(v.c_str()));
    } else if (Flag(arg, "--filter", &v)) {
      o.filter = v;
    } else if (Flag(arg, "--kernels", &v)) {
      o.kernels = v;
    } else if (Flag(arg, "--seed", &v)) {
      o.seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (Flag(arg, "--device", &v)) {
      o.device = std::atoi(v.c_str());
    } else if (arg == "--no-check") {
      o.check = false;
    } else if (arg == "--paired") {
      o.paired = true;
    } else if (arg == "--with-copies") {
      o.with_copies = true;
    } else if (arg == "--quantized") {
      o.quantized = true;
    } else if (Flag(arg, "--quantized-square", &v)) {
      std::stringstream list(v.empty() ? std::string("4096") : v);
      for (std::string item; std::getline(list, item, ',');) {
        o.square_sizes.push_back(std::max<int64_t>(1, std::atoll(item.c_str())));
      }
    } else if (Flag(arg, "--skinny-m", &v) && !v.empty()) {
      o.skinny_m.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) {
        o.skinny_m.push_back(std::clamp<int64_t>(std::atoll(item.c_str()), 1, 64));
      }
    } else if (Flag(arg, "--skinny-shapes", &v) && !v.empty()) {
      o.skinny_shapes.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) {
        const size_t x = item.find('x');
        const int64_t n = std::atoll(item.substr(0, x).c_str());
        const int64_t k = x == std::string::npos ? 0 : std::atoll(item.substr(x + 1).c_str());
        if (n > 0 && k > 0 && k % 64 == 0) o.skinny_shapes.push_back({n, k});
      }
    } else if (Flag(arg, "--swapab-l2-ahead", &v)) {
      o.swapab_l2_ahead = std::clamp(std::atoi(v.c_str()), 0, 64);
    } else if (Flag(arg, "--swapab-rows", &v)) {
      o.swapab_rows = std::atoi(v.c_str());
    } else if (Flag(arg, "--swapab-splits", &v)) {
      o.swapab_splits = std::atoi(v.c_str());
    } else if (Flag(arg, "--swapab-warpgroups", &v)) {
      o.swapab_warpgroups = std::atoi(v.c_str());
    } else if (Flag(arg, "--swapab-band", &v)) {
      o.swapab_band = std::atoi(v.c_str());
    } else if (Flag(arg, "--skinny-formats", &v) && !v.empty()) {
      o.skinny_formats.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) {
        if (item == "nvfp4" || item == "int8") o.skinny_formats.push_back(item);
      }
    } else if (Flag(arg, "--skinny-a", &v) && (v == "float16" || v == "bfloat16")) {
      o.skinny_a = v == "bfloat16" ? DataType::kBFloat16 : DataType::kFloat16;
    } else if (Flag(arg, "--skinny-k-splits", &v)) {
      o.skinny.k_splits = std::max(0, std::atoi(v.c_str()));
    } else if (Flag(arg, "--skinny-stages", &v)) {
      o.skinny.stages = std::max(0, std::atoi(v.c_str()));
    } else if (Flag(arg, "--skinny-path", &v) &&
               (v == "auto" || v == "stream" || v == "ring" || v == "regs" || v == "classic")) {
      o.skinny.path = v == "stream"    ? gemmd::gpu::SkinnyPath::kStream
                      : v == "ring"    ? gemmd::gpu::SkinnyPath::kRing
                      : v == "regs"    ? gemmd::gpu::SkinnyPath::kRegisters
                      : v == "classic" ? gemmd::gpu::SkinnyPath::kClassic
                                       : gemmd::gpu::SkinnyPath::kAuto;
    } else {
      std::fprintf(stderr,
                   "usage: gemm-bench [--csv[=FILE]] [--json[=FILE]] [--iters=N>=10] "
                   "[--warmup=N] [--filter=SUBSTR] [--kernels=SUBSTR|auto] [--seed=S] "
                   "[--device=D] [--no-check] [--paired] [--with-copies]\n"
                   "       [--quantized [--skinny-m=M,...] [--skinny-shapes=NxK,...] "
                   "[--skinny-formats=nvfp4,int8] [--swapab-l2-ahead=N] [--swapab-rows=128|256] "
                   "[--swapab-splits=1|2|4|8] [--swapab-warpgroups=4] [--swapab-band=128] "
                   "[--skinny-a=float16|bfloat16] "
                   "[--skinny-k-splits=N] [--skinny-stages=S]\n"
                   "                    [--skinny-path=auto|stream|ring|regs|classic]]\n"
                   "       [--quantized-square[=S,...]]\n");
      std::exit(arg == "--help" || arg == "-h" ? 0 : 2);
    }
  }
  return o;
}

// ---- workloads -------------------------------------------------------------------------

struct Workload {
  std::string group;  // square, skinny, batched
  int64_t batch, m, n, k;
  Precision precision;
  DataType input;

  std::string Shape() const {
    std::ostringstream s;
    if (batch > 1) s << batch << "x";
    s << m << "x" << n << "x" << k;
    return s.str();
  }
  std::string Path() const {
    if (precision == Precision::kFp32) return "FP32";
    if (precision == Precision::kFp64) return "FP64";
    return std::string("F16T/") + (input == DataType::kFloat32   ? "f32-in"
                                   : input == DataType::kFloat16 ? "f16-in"
                                                                 : "bf16-in");
  }
};

std::vector<Workload> DefaultWorkloads() {
  std::vector<Workload> w;
  for (int64_t s : {1024, 2048, 4096, 8192}) {
    w.push_back({"square", 1, s, s, s, Precision::kFp32, DataType::kFloat32});
    w.push_back({"square", 1, s, s, s, Precision::kFp64, DataType::kFloat64});
    w.push_back({"square", 1, s, s, s, Precision::kFp16Tensor, DataType::kFloat16});
    if (s >= 4096) {
      w.push_back({"square", 1, s, s, s, Precision::kFp16Tensor, DataType::kFloat32});
      w.push_back({"square", 1, s, s, s, Precision::kFp16Tensor, DataType::kBFloat16});
    }
  }
  for (int64_t m : {1, 16, 64}) {
    w.push_back({"skinny", 1, m, 8192, 8192, Precision::kFp32, DataType::kFloat32});
    w.push_back({"skinny", 1, m, 8192, 8192, Precision::kFp16Tensor, DataType::kFloat16});
  }
  for (auto [b, s] : {std::pair<int64_t, int64_t>{64, 256}, {1024, 64}}) {
    w.push_back({"batched", b, s, s, s, Precision::kFp32, DataType::kFloat32});
    w.push_back({"batched", b, s, s, s, Precision::kFp16Tensor, DataType::kFloat16});
  }
  return w;
}

struct Row {
  std::string group, shape, path, kernel;
  bool selected = false;
  bool is_cublas = false;
  double ms = 0, tflops = 0, cublas_tflops = 0, rel_error = -1;
  std::string checked;
};

// ---- timing ----------------------------------------------------------------------------

double Median(std::vector<float>& v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <typename Fn>
double MedianMs(const Options& o, int sets, Fn&& run) {
  for (int i = 0; i < o.warmup; ++i) run(i % sets);
  std::vector<cudaEvent_t> ev(2 * o.iters);
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < o.iters; ++i) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i]));
    run((o.warmup + i) % sets);
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> ms(o.iters);
  for (int i = 0; i < o.iters; ++i) {
    CHECK_CUDA(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return Median(ms);
}

// The medians of run_a and run_b timed in alternation (a, b, a, b, ...), each launch between
// its own events: both see the same clocks, power and heat, which a long FP64 run at full
// tensor load changes within one kernel's timing.
template <typename FnA, typename FnB>
std::pair<double, double> PairedMedianMs(const Options& o, int sets, FnA&& run_a, FnB&& run_b) {
  for (int i = 0; i < o.warmup; ++i) {
    run_a(i % sets);
    run_b(i % sets);
  }
  std::vector<cudaEvent_t> ev(4 * o.iters);
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < o.iters; ++i) {
    const int s = (o.warmup + i) % sets;
    CHECK_CUDA(cudaEventRecord(ev[4 * i]));
    run_a(s);
    CHECK_CUDA(cudaEventRecord(ev[4 * i + 1]));
    CHECK_CUDA(cudaEventRecord(ev[4 * i + 2]));
    run_b(s);
    CHECK_CUDA(cudaEventRecord(ev[4 * i + 3]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> a(o.iters), b(o.iters);
  for (int i = 0; i < o.iters; ++i) {
    CHECK_CUDA(cudaEventElapsedTime(&a[i], ev[4 * i], ev[4 * i + 1]));
    CHECK_CUDA(cudaEventElapsedTime(&b[i], ev[4 * i + 2], ev[4 * i + 3]));
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return {Median(a), Median(b)};
}

// ---- reference ---------------------------------------------------------------------------

struct RefRows {
  std::vector<int64_t> items, rows;  // sampled (item, row) pairs, n outputs each
  std::vector<double> values;
  std::string what;
};

RefRows ComputeReference(const GemmProblem& p, const GemmOperands& host) {
  RefRows r;
  const double fmas = static_cast<double>(p.batch) * p.m * p.n * p.k;
  std::vector<int64_t> items;
  std::vector<int64_t> rows;
  if (fmas <= (1 << 26)) {
    for (int64_t b = 0; b < p.batch; ++b) items.push_back(b);
    for (int64_t i = 0; i < p.m; ++i) rows.push_back(i);
    r.what = "all";
  } else {
    items = {0};
    if (p.batch > 1) items = {0, p.batch / 2, p.batch - 1};
    const int64_t per_row = p.n * p.k;
    // About 2^27 multiply-adds per item in total, at least 2 rows.
    int64_t want = std::clamp<int64_t>((int64_t{1} << 27) / std::max<int64_t>(per_row, 1), 2, 16);
    if (p.m <= want) {
      for (int64_t i = 0; i < p.m; ++i) rows.push_back(i);
    } else {
      for (int64_t j = 0; j < want; ++j) rows.push_back(j * (p.m - 1) / (want - 1));
    }
    r.what = std::to_string(items.size() * rows.size()) + " rows";
  }
  for (int64_t b : items) {
    for (int64_t i : rows) {
      r.items.push_back(b);
      r.rows.push_back(i);
    }
  }
  r.values.resize(r.items.size() * p.n);
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t j = t; j < r.items.size(); j += threads) {
        gemmd::ReferenceGemmRows(p, host, r.items[j], r.rows[j], r.rows[j] + 1,
                                 r.values.data() + j * p.n);
      }
    });
  }
  for (auto& th : pool) th.join();
  return r;
}

double ErrorAgainst(const RefRows& ref, const GemmProblem& p, const void* d_c) {
  const size_t elem = gemmd::DataTypeSize(p.c_type);
  std::vector<char> got(ref.items.size() * p.n * elem);
  for (size_t j = 0; j < ref.items.size(); ++j) {
    CHECK_CUDA(cudaMemcpy(
        got.data() + j * p.n * elem,
        static_cast<const char*>(d_c) + (ref.items[j] * p.StrideC() + ref.rows[j] * p.n) * elem,
        p.n * elem, cudaMemcpyDeviceToHost));
  }
  return gemmd::RelativeError(ref.values.data(), got.data(), p.c_type,
                              static_cast<int64_t>(ref.items.size() * p.n));
}

// ---- cuBLAS ------------------------------------------------------------------------------

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
void CublasRun(cublasHandle_t h, const GemmProblem& p, DataType type, const void* a, const void* b,
               void* c_out) {
  const float alpha = p.alpha, beta = p.beta;
  const cublasOperation_t op_a = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int lda = static_cast<int>(p.lda()), ldb = static_cast<int>(p.ldb());
  if (type == DataType::kFloat64) {  // cublasDgemm: the FP64 tensor cores on sm_80+
    const double alpha64 = p.alpha, beta64 = p.beta;
    double* c = static_cast<double*>(c_out);
    if (p.batch == 1) {
      CHECK_CUBLAS(cublasDgemm(h, op_b, op_a, n, m, k, &alpha64, static_cast<const double*>(b), ldb,
                               static_cast<const double*>(a), lda, &beta64, c, n));
    } else {
      CHECK_CUBLAS(cublasDgemmStridedBatched(
          h, op_b, op_a, n, m, k, &alpha64, static_cast<const double*>(b), ldb, p.StrideB(),
          static_cast<const double*>(a), lda, p.StrideA(), &beta64, c, n, p.StrideC(),
          static_cast<int>(p.batch)));
    }
    return;
  }
  float* c = static_cast<float*>(c_out);
  if (type == DataType::kFloat32) {
    if (p.batch == 1) {
      CHECK_CUBLAS(cublasSgemm(h, op_b, op_a, n, m, k, &alpha, static_cast<const float*>(b),
                               ldb, static_cast<const float*>(a), lda, &beta, c, n));
    } else {
      CHECK_CUBLAS(cublasSgemmStridedBatched(
          h, op_b, op_a, n, m, k, &alpha, static_cast<const float*>(b), ldb, p.StrideB(),
          static_cast<const float*>(a), lda, p.StrideA(), &beta, c, n, p.StrideC(),
          static_cast<int>(p.batch)));
    }
    return;
  }
  const cudaDataType_t t = type == DataType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
  if (p.batch == 1) {
    CHECK_CUBLAS(cublasGemmEx(h, op_b, op_a, n, m, k, &alpha, b, t, ldb, a, t, lda, &beta, c,
                              CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, &alpha, b, t, ldb,
                                            p.StrideB(), a, t, lda, p.StrideA(), &beta, c,
                                            CUDA_R_32F, n, p.StrideC(),
                                            static_cast<int>(p.batch), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  }
}

// ---- one workload ------------------------------------------------------------------------

void RunWorkload(const Options& o, const DeviceCaps& caps, cublasHandle_t handle,
                 const Workload& w, uint64_t seed, std::vector<Row>* rows) {
  GemmProblem p;
  p.batch = w.batch;
  p.m = w.m;
  p.n = w.n;
  p.k = w.k;
  p.a_type = p.b_type = w.input;
  p.c_type = w.precision == Precision::kFp64 ? DataType::kFloat64 : DataType::kFloat32;
  p.precision = w.precision;
  const size_t in_bytes = gemmd::DataTypeSize(w.input);
  const size_t a_bytes = p.ElementsA() * in_bytes, b_bytes = p.ElementsB() * in_bytes;
  const size_t c_bytes = p.ElementsC() * gemmd::DataTypeSize(p.c_type);
  const size_t set_bytes = a_bytes + b_bytes + c_bytes;
  const int sets = static_cast<int>(std::clamp<int64_t>(
      (3 * caps.l2_cache_bytes + set_bytes - 1) / set_bytes, 1, 16));

  // cuBLAS has no FP32-in tensor GEMM: it gets FP16 copies (conversion not charged).
  const bool cublas_f16_copy = w.precision == Precision::kFp16Tensor && w.input == DataType::kFloat32;
  const DataType cublas_type = w.precision == Precision::kFp32   ? DataType::kFloat32
                               : w.precision == Precision::kFp64 ? DataType::kFloat64
                               : cublas_f16_copy                 ? DataType::kFloat16
                                                                 : w.input;
  std::vector<DevMem> A, B, C, A16, B16;
  for (int s = 0; s < sets; ++s) {
    A.emplace_back(a_bytes);
    B.emplace_back(b_bytes);
    C.emplace_back(c_bytes);
    Fill(w.input, A[s].p, p.ElementsA(), seed * 1000 + 2 * s);
    Fill(w.input, B[s].p, p.ElementsB(), seed * 1000 + 2 * s + 1);
    if (cublas_f16_copy) {
      A16.emplace_back(p.ElementsA() * 2);
      B16.emplace_back(p.ElementsB() * 2);
      FloatToHalf<<<Blocks(p.ElementsA()), 256>>>(static_cast<const float*>(A[s].p),
                                                 static_cast<__half*>(A16[s].p), p.ElementsA());
      FloatToHalf<<<Blocks(p.ElementsB()), 256>>>(static_cast<const float*>(B[s].p),
                                                 static_cast<__half*>(B16[s].p), p.ElementsB());
      CHECK_CUDA(cudaGetLastError());
    }
  }
  CHECK_CUDA(cudaDeviceSynchronize());

  RefRows ref;
  if (o.check) {
    std::vector<char> ha(a_bytes), hb(b_bytes);
    CHECK_CUDA(cudaMemcpy(ha.data(), A[0].p, a_bytes, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hb.data(), B[0].p, b_bytes, cudaMemcpyDeviceToHost));
    GemmOperands host{ha.data(), hb.data(), nullptr, nullptr};
    ref = ComputeReference(p, host);
  }
  auto error_of_set0 = [&]() -> double {
    if (!o.check) return -1;
    CHECK_CUDA(cudaDeviceSynchronize());
    return ErrorAgainst(ref, p, C[0].p);
  };
  auto poison_set0 = [&] { CHECK_CUDA(cudaMemset(C[0].p, 0xFF, c_bytes)); };

  const double flops = p.Flops();
  // cuBLAS
  const double cublas_ms = MedianMs(o, sets, [&](int s) {
    CublasRun(handle, p, cublas_type, cublas_f16_copy ? A16[s].p : A[s].p,
              cublas_f16_copy ? B16[s].p : B[s].p, C[s].p);
  });
  poison_set0();
  CublasRun(handle, p, cublas_type, cublas_f16_copy ? A16[0].p : A[0].p,
            cublas_f16_copy ? B16[0].p : B[0].p, C[0].p);
  Row base;
  base.group = w.group;
  base.shape = w.Shape();
  base.path = w.Path();
  base.kernel = cublas_f16_copy ? "cuBLAS (on FP16 copies)" : "cuBLAS";
  base.is_cublas = true;
  base.ms = cublas_ms;
  base.tflops = flops / (cublas_ms * 1e-3) / 1e12;
  base.cublas_tflops = base.tflops;
  base.rel_error = error_of_set0();
  base.checked = ref.what;
  rows->push_back(base);

  auto selected = gemmd::gpu::SelectKernel(p, caps);
  const std::string selected_name =
      selected.ok() ? std::string((*selected)->name()) : std::string();
  for (const GpuGemmKernel* kernel : KernelRegistry::Global().kernels()) {
    if (kernel->precision() != w.precision || !kernel->CanImplement(p) ||
        caps.compute_capability < kernel->min_compute_capability()) {
      continue;
    }
    const std::string name(kernel->name());
    if (o.kernels == "auto" ? name != selected_name
                            : (!o.kernels.empty() && name.find(o.kernels) == std::string::npos)) {
      continue;
    }
    const size_t ws_bytes = kernel->WorkspaceBytes(p);
    DevMem ws(ws_bytes);
    auto launch = [&](int s) {
      GemmOperands ops{A[s].p, B[s].p, nullptr, C[s].p};
      const absl::Status st = kernel->Launch(p, ops, ws.p, ws_bytes, nullptr);
      if (!st.ok()) {
        std::cerr << name << ": " << st << "\n";
        std::exit(1);
      }
    };
    double ms = 0, yardstick_ms = cublas_ms;
    if (o.paired) {
      std::tie(yardstick_ms, ms) = PairedMedianMs(
          o, sets,
          [&](int s) {
            CublasRun(handle, p, cublas_type, cublas_f16_copy ? A16[s].p : A[s].p,
                      cublas_f16_copy ? B16[s].p : B[s].p, C[s].p);
          },
          launch);
    } else {
      ms = MedianMs(o, sets, launch);
    }
    poison_set0();
    launch(0);
    Row r;
    r.group = w.group;
    r.shape = w.Shape();
    r.path = w.Path();
    r.kernel = name;
    r.selected = name == selected_name;
    r.ms = ms;
    r.tflops = flops / (ms * 1e-3) / 1e12;
    r.cublas_tflops = flops / (yardstick_ms * 1e-3) / 1e12;
    r.rel_error = error_of_set0();
    r.checked = ref.what;
    rows->push_back(r);
    std::fprintf(stderr,
                 "  %-10s %-14s %-34s %9.3f ms %8.2f TFLOP/s  %5.1f%% of cuBLAS  err %.2e\n",
                 r.path.c_str(), r.shape.c_str(), r.kernel.c_str(), r.ms, r.tflops,
                 100.0 * r.tflops / r.cublas_tflops, r.rel_error);
  }
  std::fprintf(stderr, "  %-10s %-14s %-34s %9.3f ms %8.2f TFLOP/s  (%d buffer set%s)\n",
               base.path.c_str(), base.shape.c_str(), base.kernel.c_str(), base.ms, base.tflops,
               sets, sets > 1 ? "s" : "");
}

// ---- copies + kernel, in-process --------------------------------------------------------

struct CopyRow {
  std::string shape, path, kernel;
  double pageable_ms = 0, pinned_ms = 0, kernel_ms = 0;
};

void RunWithCopies(const Options& o, const DeviceCaps& caps, const Workload& w, uint64_t seed,
                   std::vector<CopyRow>* rows) {
  GemmProblem p;
  p.batch = w.batch;
  p.m = w.m;
  p.n = w.n;
  p.k = w.k;
  p.a_type = p.b_type = w.input;
  p.c_type = w.precision == Precision::kFp64 ? DataType::kFloat64 : DataType::kFloat32;
  p.precision = w.precision;
  auto selected = gemmd::gpu::SelectKernel(p, caps);
  if (!selected.ok()) return;
  const GpuGemmKernel* kernel = *selected;
  const size_t in_bytes = gemmd::DataTypeSize(w.input);
  const size_t a_bytes = p.ElementsA() * in_bytes, b_bytes = p.ElementsB() * in_bytes;
  const size_t c_bytes = p.ElementsC() * gemmd::DataTypeSize(p.c_type);
  const size_t ws_bytes = kernel->WorkspaceBytes(p);
  DevMem dA(a_bytes), dB(b_bytes), dC(c_bytes), ws(ws_bytes);
  Fill(w.input, dA.p, p.ElementsA(), seed * 7919);
  Fill(w.input, dB.p, p.ElementsB(), seed * 7919 + 1);
  std::vector<char> ha(a_bytes), hb(b_bytes), hc(c_bytes);
  CHECK_CUDA(cudaMemcpy(ha.data(), dA.p, a_bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hb.data(), dB.p, b_bytes, cudaMemcpyDeviceToHost));
  void *pa, *pb, *pc;
  CHECK_CUDA(cudaMallocHost(&pa, a_bytes));
  CHECK_CUDA(cudaMallocHost(&pb, b_bytes));
  CHECK_CUDA(cudaMallocHost(&pc, c_bytes));
  std::memcpy(pa, ha.data(), a_bytes);
  std::memcpy(pb, hb.data(), b_bytes);
  auto launch = [&](int) {
    GemmOperands ops{dA.p, dB.p, nullptr, dC.p};
    const absl::Status st = kernel->Launch(p, ops, ws.p, ws_bytes, nullptr);
    if (!st.ok()) {
      std::cerr << kernel->name() << ": " << st << "\n";
      std::exit(1);
    }
  };
  // The last cudaMemcpy waits for everything before it on the (legacy) default stream.
  auto median_round_trip_ms = [&](const void* a, const void* b, void* c) {
    std::vector<double> ms;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      CHECK_CUDA(cudaMemcpy(dA.p, a, a_bytes, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dB.p, b, b_bytes, cudaMemcpyHostToDevice));
      launch(0);
      CHECK_CUDA(cudaMemcpy(c, dC.p, c_bytes, cudaMemcpyDeviceToHost));
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  CopyRow r;
  r.shape = w.Shape();
  r.path = w.Path();
  r.kernel = std::string(kernel->name());
  r.pageable_ms = median_round_trip_ms(ha.data(), hb.data(), hc.data());
  r.pinned_ms = median_round_trip_ms(pa, pb, pc);
  r.kernel_ms = MedianMs(o, 1, launch);
  CHECK_CUDA(cudaFreeHost(pa));
  CHECK_CUDA(cudaFreeHost(pb));
  CHECK_CUDA(cudaFreeHost(pc));
  std::fprintf(stderr, "  %-10s %-14s copies+kernel: pageable %.3f ms, pinned %.3f ms, kernel %.3f ms\n",
               r.path.c_str(), r.shape.c_str(), r.pageable_ms, r.pinned_ms, r.kernel_ms);
  rows->push_back(r);
}

// ---- quantized skinny ------------------------------------------------------------------

std::string Fixed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}
std::string Sci(double v) {
  if (v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1e", v);
  return buf;
}

using gemmd::gpu::SquareMmaPath;

// Both kernel families where this build and device have wgmma, else mma.sync alone.
std::vector<SquareMmaPath> SquarePaths() {
  if (gemmd::gpu::SquareWgmmaAvailable()) return {SquareMmaPath::kWgmma, SquareMmaPath::kMmaSync};
  return {SquareMmaPath::kMmaSync};
}

struct QuantRow {
  std::string shape, format, kernel;
  double ms = 0, cublas_ms = 0, bytes = 0, cublas_bytes = 0, rel_error = -1;
};

// FP64 reference rows of dequantized A (or FP16 A) times dequantized B^T, on up to 16
// threads, each a share of every row's columns (a 28672 x 8192 weight's two rows take
// 470 M multiply-adds: the reference, not the GPU, set the skinny sweep's pace).
std::vector<double> DenseRefRows(const std::vector<int64_t>& rows, const float* a, const float* b,
                                 int64_t n, int64_t k) {
  std::vector<double> ref(rows.size() * n);
  const int64_t threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t r = 0; r < rows.size(); ++r) {
        for (int64_t j = t * n / threads; j < (t + 1) * n / threads; ++j) {
          double s = 0;
          for (int64_t kk = 0; kk < k; ++kk) s += double{a[rows[r] * k + kk]} * b[j * k + kk];
          ref[r * n + j] = s;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return ref;
}

// A weight-only problem's weight, made once for every M of a sweep: quantized on the host
// from uniform(-1, 1) data, its dequantized values (the reference's), and its copies on the
// device (canonical, swap-AB, swap-AB in bands of 128 rows), rotated over enough of them to
// stay out of L2.
struct SkinnyWeight {
  gemmd::QuantFormat format = gemmd::QuantFormat::kNvfp4;
  int64_t n = 0, k = 0;
  std::vector<float> deq;
  float tensor_scale = 1.0f;
  size_t weight_bytes = 0;
  int sets = 1;
  std::vector<DevMem> data, scales, packed, packed128;  // packed*: empty where it does not fit
};

SkinnyWeight MakeSkinnyWeight(const Options& o, const DeviceCaps& caps, gemmd::QuantFormat format,
                              int64_t n, int64_t k, uint64_t seed) {
  using gemmd::QuantFormat;
  SkinnyWeight w;
  w.format = format;
  w.n = n;
  w.k = k;
  std::vector<float> x(static_cast<size_t>(n * k));
  uint64_t state = seed;
  for (float& v : x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
  w.deq.resize(x.size());
  std::string data, scales;
  if (format == QuantFormat::kInt8) {
    const gemmd::Int8Matrix q = *gemmd::QuantizeInt8(x.data(), n, k);
    gemmd::DequantizeInt8(q, w.deq.data());
    data.assign(reinterpret_cast<const char*>(q.values.data()), q.values.size());
    scales.assign(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4);
  } else {
    const gemmd::Nvfp4Matrix q = *gemmd::QuantizeNvfp4(x.data(), n, k);
    (void)gemmd::DequantizeNvfp4(q, w.deq.data());
    data.assign(reinterpret_cast<const char*>(q.packed.data()), q.packed.size());
    scales.assign(reinterpret_cast<const char*>(q.block_scales.data()), q.block_scales.size());
    w.tensor_scale = q.tensor_scale;
  }
  w.weight_bytes = data.size() + scales.size();
  w.sets = static_cast<int>(
      std::clamp<int64_t>((3 * caps.l2_cache_bytes + w.weight_bytes - 1) / w.weight_bytes, 1, 16));
  const auto upload = [&](const void* bytes, size_t size, std::vector<DevMem>* to) {
    for (int i = 0; i < w.sets; ++i) {
      to->emplace_back(size);
      CHECK_CUDA(cudaMemcpy(to->back().p, bytes, size, cudaMemcpyHostToDevice));
    }
  };
  upload(data.data(), data.size(), &w.data);
  upload(scales.data(), scales.size(), &w.scales);
  // The swap-AB layout (quant_prepack.h), prepacked on the host as an upload would, and in
  // bands of 128 rows (each 128-row slab prepacked alone) for --swapab-band=128.
  if (gemmd::Nvfp4SwapAbFits(n, k)) {
    const auto* codes = reinterpret_cast<const uint8_t*>(data.data());
    const auto* scale_bytes = reinterpret_cast<const uint8_t*>(scales.data());
    std::vector<uint8_t> packed(w.weight_bytes);
    const absl::Status prepacked =
        format == QuantFormat::kInt8
            ? gemmd::PrepackInt8SwapAb(reinterpret_cast<const int8_t*>(codes), scale_bytes, n, k,
                                       packed.data())
            : gemmd::PrepackNvfp4SwapAb(codes, scale_bytes, n, k, packed.data());
    if (!prepacked.ok()) {
      std::cerr << "swap-AB prepack: " << prepacked << "\n";
      std::exit(1);
    }
    upload(packed.data(), packed.size(), &w.packed);
    if (o.swapab_band == 128 && n % 128 == 0) {
      const absl::Status st =
          gemmd::PrepackSwapAbInBands(format, codes, scale_bytes, n, k, 128, packed.data());
      if (!st.ok()) {
        std::cerr << "swap-AB prepack (bands of 128): " << st << "\n";
        std::exit(1);
      }
      upload(packed.data(), packed.size(), &w.packed128);
    }
  }
  return w;
}

// One weight-only problem: A [m, k] FP16, B [n, k] (`w`), against cuBLAS FP16.
void RunQuantizedSkinny(const Options& o, const DeviceCaps& caps, cublasHandle_t handle,
                        const SkinnyWeight& w, int64_t m, uint64_t seed,
                        std::vector<QuantRow>* rows) {
  using gemmd::QuantFormat;
  const QuantFormat format = w.format;
  const int64_t n = w.n, k = w.k;
  const int sets = w.sets;
  const float tensor_scale = w.tensor_scale;
  const size_t weight_bytes = w.weight_bytes;
  const std::vector<DevMem>& d_data = w.data;
  const std::vector<DevMem>& d_scales = w.scales;
  // Our A in --skinny-a's type; cuBLAS's baseline stays FP16 (d_a16).
  const DataType a_type = o.skinny_a;
  DevMem d_a(m * k * 2), d_a16(m * k * 2), d_c(m * n * 4);
  Fill(a_type, d_a.p, m * k, seed + 1);
  Fill(DataType::kFloat16, d_a16.p, m * k, seed + 1);
  const size_t ws_bytes = gemmd::gpu::SkinnyQuantizedWorkspaceBytes(a_type, m, k);
  DevMem ws(ws_bytes);
  auto launch = [&](int set) {
    const gemmd::gpu::DeviceQuantizedWeight b{format, d_data[set].p, d_scales[set].p,
                                              tensor_scale, n, k};
    const absl::Status st = gemmd::gpu::LaunchSkinnyQuantizedGemm(
        d_a.p, a_type, m, b, static_cast<float*>(d_c.p), ws.p, ws_bytes, nullptr, o.skinny);
    if (!st.ok()) {
      std::cerr << "skinny quantized: " << st << "\n";
      std::exit(1);
    }
  };
  QuantRow r;
  r.shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  r.format = gemmd::QuantFormatName(format);
  if (a_type == DataType::kBFloat16) r.format += " (BF16 A)";
  {
    // The path the launcher takes (its catalogue entry's name); "classic" sweeps name the
    // ring or register path they resolve to.
    const gemmd::gpu::DeviceQuantizedWeight b{format, d_data[0].p, d_scales[0].p, tensor_scale,
                                              n, k};
    gemmd::gpu::SkinnyPath path = o.skinny.path;
    if (path == gemmd::gpu::SkinnyPath::kAuto || path == gemmd::gpu::SkinnyPath::kClassic) {
      const absl::StatusOr<gemmd::gpu::SkinnyPath> chosen = gemmd::gpu::ChooseSkinnyPath(
          a_type == DataType::kFloat16 ? d_a.p : gemmd::gpu::kArenaAligned, a_type, m, b);
      path = chosen.ok() ? *chosen : gemmd::gpu::SkinnyPath::kRegisters;
      if (o.skinny.path == gemmd::gpu::SkinnyPath::kClassic &&
          path == gemmd::gpu::SkinnyPath::kStream) {
        path = gemmd::gpu::SkinnyPath::kRegisters;
      }
    }
    r.kernel = gemmd::gpu::SkinnyKernelName(format, path);
  }
  r.ms = MedianMs(o, sets, launch);
  r.bytes = static_cast<double>(weight_bytes + m * k * 2 + m * n * 4);

  // Error on two rows of C against FP64 on the dequantized weight, after one run of `run`.
  auto c_error = [&](auto&& run) -> double {
    if (!o.check) return -1;
    CHECK_CUDA(cudaMemset(d_c.p, 0xFF, m * n * 4));
    run(0);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> a_bits(static_cast<size_t>(m * k));
    std::vector<float> c(static_cast<size_t>(m * n));
    CHECK_CUDA(cudaMemcpy(a_bits.data(), d_a.p, a_bits.size() * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(c.data(), d_c.p, c.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> a(a_bits.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = a_type == DataType::kBFloat16 ? gemmd::Bf16BitsToFloat(a_bits[i])
                                           : gemmd::HalfBitsToFloat(a_bits[i]);
    }
    const std::vector<int64_t> sample = {0, m - 1};
    const std::vector<double> ref = DenseRefRows(sample, a.data(), w.deq.data(), n, k);
    double num = 0, den = 0;
    for (size_t r = 0; r < sample.size(); ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const double want = ref[r * n + j], got = c[sample[r] * n + j];
        num += (got - want) * (got - want);
        den += want * want;
      }
    }
    return std::sqrt(num / den);
  };
  r.rel_error = c_error(launch);

  // cuBLAS FP16 on the same shape: B [n, k] FP16 (rotated the same way), C = A B^T.
  const size_t b16_bytes = static_cast<size_t>(n * k * 2);
  const int sets16 = static_cast<int>(std::clamp<int64_t>(
      (3 * caps.l2_cache_bytes + b16_bytes - 1) / b16_bytes, 1, 16));
  std::vector<DevMem> d_b16;
  for (int i = 0; i < sets16; ++i) {
    d_b16.emplace_back(b16_bytes);
    Fill(DataType::kFloat16, d_b16.back().p, n * k, seed + 2 + i);
  }
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_b = true;
  p.a_type = p.b_type = DataType::kFloat16;
  p.precision = Precision::kFp16Tensor;
  r.cublas_ms = MedianMs(o, sets16, [&](int set) {
    CublasRun(handle, p, DataType::kFloat16, d_a16.p, d_b16[set].p, static_cast<float*>(d_c.p));
  });
  r.cublas_bytes = static_cast<double>(b16_bytes + m * k * 2 + m * n * 4);
  std::fprintf(stderr,
               "  %-6s %-16s ours %8.4f ms (%6.0f GB/s)  cuBLAS FP16 %8.4f ms (%6.0f GB/s)  "
               "%.2fx  err %.2e\n",
               r.format.c_str(), r.shape.c_str(), r.ms, r.bytes / r.ms / 1e6, r.cublas_ms,
               r.cublas_bytes / r.cublas_ms / 1e6, r.cublas_ms / r.ms, r.rel_error);
  rows->push_back(r);

  // The swap-AB kernel (quant_swapab.h) on the same weight in its layout (quant_prepack.h).
  if (a_type == DataType::kFloat16 && !w.packed.empty()) {
    const bool int8 = format == QuantFormat::kInt8;
    const std::vector<DevMem>& d_packed = w.packed;
    const std::vector<DevMem>& d_packed128 = w.packed128;
    // mma.sync without and with the L2 requests ahead (--swapab-l2-ahead=N; 0: without
    // only), then wgmma where it runs.
    std::vector<gemmd::gpu::SwapAbOptions> variants;
    for (int ahead : {0, o.swapab_l2_ahead}) {
      if (ahead > 0 || variants.empty()) {
        variants.push_back({gemmd::gpu::SwapAbPath::kMmaSync, ahead, 0, 0});
      }
    }
    if (gemmd::gpu::ResolveSwapAbPath(gemmd::gpu::SwapAbPath::kWgmma).ok()) {
      for (int k_tiles : {1, 4}) {
        variants.push_back(
            {gemmd::gpu::SwapAbPath::kWgmma, 0, o.swapab_rows, o.swapab_splits, k_tiles});
      }
      if (o.swapab_warpgroups == 4) {
        variants.push_back({gemmd::gpu::SwapAbPath::kWgmma, 0, 256, o.swapab_splits, 4, 4});
      }
      if (!d_packed128.empty()) {
        gemmd::gpu::SwapAbOptions band128{gemmd::gpu::SwapAbPath::kWgmma, 0, 128, o.swapab_splits,
                                          4};
        band128.band_rows = 128;
        variants.push_back(band128);
      }
    }
    for (const gemmd::gpu::SwapAbOptions& options : variants) {
      const std::vector<DevMem>& weights = options.band_rows == 128 ? d_packed128 : d_packed;
      auto launch_swapab = [&](int set) {
        float* c = static_cast<float*>(d_c.p);
        const absl::Status st =
            int8 ? gemmd::gpu::LaunchSwapAbInt8(d_a.p, m, weights[set].p, n, k, c, nullptr, options)
                 : gemmd::gpu::LaunchSwapAbNvfp4(d_a.p, m, weights[set].p, tensor_scale, n, k, c,
                                                 nullptr, options);
        if (!st.ok()) {
          std::cerr << "swap-AB: " << st << "\n";
          std::exit(1);
        }
      };
      QuantRow sw = r;
      sw.kernel =
          gemmd::gpu::SwapAbKernelName(int8, options.path) +
          (options.l2_ahead > 0 ? " (L2 ahead " + std::to_string(options.l2_ahead) + ")" : "") +
          (options.k_tiles_per_stage > 0
               ? " (" + std::to_string(options.k_tiles_per_stage) + " K tiles a stage" +
                     (options.warpgroups == 4 ? ", 4 warpgroups" : "") +
                     (options.band_rows == 128 ? ", bands of 128 rows)" : ")")
               : "");
      sw.ms = MedianMs(o, sets, launch_swapab);
      sw.rel_error = c_error(launch_swapab);
      std::fprintf(stderr, "  %-6s %-16s %s %8.4f ms (%6.0f GB/s)  %.2fx  err %.2e\n",
                   sw.format.c_str(), sw.shape.c_str(), sw.kernel.c_str(), sw.ms,
                   sw.bytes / sw.ms / 1e6, sw.cublas_ms / sw.ms, sw.rel_error);
      rows->push_back(sw);
    }
  }

  // The square FP16 x NVFP4 kernel on the same problem: what the server's plan weighs the
  // skinny kernel against past 16 rows (gpu::SelectQuantizedKernel, kernel_select.cc).
  const gemmd::gpu::DeviceQuantizedWeight b0{format, d_data[0].p, d_scales[0].p, tensor_scale,
                                             n, k};
  if (format == QuantFormat::kNvfp4 && a_type == DataType::kFloat16 && m > 16 &&
      gemmd::gpu::SupportsSquareFp16Nvfp4Gemm(d_a.p, m, k, b0).ok()) {
    const SquareMmaPath path = SquarePaths().front();
    QuantRow sq = r;
    sq.kernel = gemmd::gpu::SquareKernelName(format, /*fp16_a=*/true, path);
    sq.ms = MedianMs(o, sets, [&](int set) {
      const gemmd::gpu::DeviceQuantizedWeight b{format, d_data[set].p, d_scales[set].p,
                                                tensor_scale, n, k};
      const absl::Status st = gemmd::gpu::LaunchSquareFp16Nvfp4Gemm(
          d_a.p, m, k, b, static_cast<float*>(d_c.p), nullptr, path);
      if (!st.ok()) {
        std::cerr << "square fp16 x nvfp4: " << st << "\n";
        std::exit(1);
      }
    });
    sq.rel_error = -1;  // checked by the square table (--quantized-square)
    std::fprintf(stderr, "  %-6s %-16s %s %8.4f ms  %.2fx\n", sq.format.c_str(),
                 sq.shape.c_str(), sq.kernel.c_str(), sq.ms, sq.cublas_ms / sq.ms);
    rows->push_back(sq);
  }
}

void PrintQuantTable(const std::vector<QuantRow>& rows, std::ostream& out) {
  out << "\nSkinny weight-only quantized GEMM vs cuBLAS FP16 (median of CUDA-event times; "
         "bytes = weight + A + C per call; device copy rate 4.1 TB/s)\n\n"
         "| shape MxNxK | weight | kernel | ms | GB/s | of 4.1 TB/s | cuBLAS FP16 ms | "
         "speed-up | rel. error |\n|---|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const QuantRow& r : rows) {
    char line[384];
    const double gbps = r.bytes / r.ms / 1e6;
    std::snprintf(line, sizeof(line),
                  "| %s | %s | %s | %.4f | %.0f | %.0f%% | %.4f | %.2fx | %s |\n",
                  r.shape.c_str(), r.format.c_str(), r.kernel.c_str(), r.ms, gbps,
                  100.0 * gbps / 4100.0, r.cublas_ms, r.cublas_ms / r.ms,
                  Sci(r.rel_error).c_str());
    out << line;
  }
}

void PrintCopyTable(const std::vector<CopyRow>& rows, std::ostream& out) {
  out << "\nIn-process copies + kernel (cudaMemcpy A,B in; launch; cudaMemcpy C out; median wall "
         "ms)\n\n| shape | path | kernel | pageable host | pinned host | kernel alone |\n"
         "|---|---|---|---:|---:|---:|\n";
  for (const CopyRow& r : rows) {
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %s | %s | %.3f | %.3f | %.3f |\n", r.shape.c_str(),
                  r.path.c_str(), r.kernel.c_str(), r.pageable_ms, r.pinned_ms, r.kernel_ms);
    out << line;
  }
}

// ---- output ------------------------------------------------------------------------------


// ---- quantized square ------------------------------------------------------------------

struct SquareRow {
  std::string shape, kernel, operands, baseline;
  double ms = 0, tops = 0, baseline_tops = 0, rel_error = -1;
  double ours16_tops = 0;  // our FP16 path on the same shape (FP16 and NVFP4 rows), else 0
};

// uniform(-1,1) on the host, 24-bit values (exact in FP32); the same stream per seed.
std::vector<float> HostUniform(int64_t count, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(count));
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& v : x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
  return x;
}

template <typename T>
std::vector<DevMem> UploadSets(const std::vector<T>& host, int sets) {
  std::vector<DevMem> out;
  for (int i = 0; i < sets; ++i) {
    out.emplace_back(host.size() * sizeof(T));
    CHECK_CUDA(cudaMemcpy(out.back().p, host.data(), host.size() * sizeof(T),
                          cudaMemcpyHostToDevice));
  }
  return out;
}

std::vector<DevMem> AllocSets(size_t bytes, int sets) {
  std::vector<DevMem> out;
  for (int i = 0; i < sets; ++i) out.emplace_back(bytes);
  return out;
}

int SetsFor(const DeviceCaps& caps, double set_bytes) {
  return static_cast<int>(std::clamp<double>(std::ceil(3.0 * caps.l2_cache_bytes / set_bytes), 1, 16));
}

// Rows of C the error is measured on.
std::vector<int64_t> SampleRows(int64_t m) { return {0, m / 3, 2 * m / 3, m - 1}; }

// ||C - ref|| / ||ref|| over the sampled rows; ref holds n values per sampled row.
double SampledError(const std::vector<int64_t>& rows, const std::vector<double>& ref, int64_t n,
                    const float* d_c) {
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> got(rows.size() * n);
  for (size_t r = 0; r < rows.size(); ++r) {
    CHECK_CUDA(cudaMemcpy(got.data() + r * n, d_c + rows[r] * n, n * 4, cudaMemcpyDeviceToHost));
  }
  return gemmd::RelativeError(ref.data(), got.data(), DataType::kFloat32,
                              static_cast<int64_t>(got.size()));
}

void Report(const SquareRow& r, std::vector<SquareRow>* rows) {
  std::fprintf(stderr, "  %-10s %-36s %-14s %8.4f ms %8.1f T/s  %6.1f%% of %s  err %.2e\n",
               r.shape.c_str(), r.kernel.c_str(), r.operands.c_str(), r.ms, r.tops,
               r.baseline.empty() ? 100.0 : 100.0 * r.tops / r.baseline_tops,
               r.baseline.empty() ? "itself" : r.baseline.c_str(), r.rel_error);
  rows->push_back(r);
}

// s x s x s: our INT8 kernel against cublasGemmEx 8I -> 32I, our NVFP4 kernels (NVFP4 A
// and FP16 A) against hgemm_wmma_128x128x32_s4 and cuBLAS FP16, all TN (A [M,K], B [N,K]).
void RunQuantizedSquare(const Options& o, const DeviceCaps& caps, cublasHandle_t handle,
                        int64_t s, uint64_t seed, std::vector<SquareRow>* rows) {
  using gemmd::QuantFormat;
  using gemmd::gpu::DeviceQuantizedWeight;
  const int64_t m = s, n = s, k = s;
  const double ops = 2.0 * m * n * k;
  const std::string shape = std::to_string(m) + "^3";
  const std::vector<int64_t> sample = SampleRows(m);
  const std::vector<float> xa = HostUniform(m * k, seed), xb = HostUniform(n * k, seed + 1);
  auto tops = [&](double ms) { return ops / (ms * 1e-3) / 1e12; };
  auto check = [](const absl::Status& st, const char* what) {
    if (!st.ok()) {
      std::cerr << what << ": " << st << "\n";
      std::exit(1);
    }
  };
  double ours16_tops = 0;  // set once our FP16 path is timed, below
  // Times `launch` over `sets`, then checks the sampled rows of one run's C (at c0, NaN
  // first) against `ref`, and reports the row.
  auto time_and_check = [&](SquareRow r, int sets, const auto& launch, double baseline_tops,
                            void* c0, const std::vector<double>& ref) {
    r.ms = MedianMs(o, sets, launch);
    r.tops = tops(r.ms);
    r.baseline_tops = baseline_tops;
    r.ours16_tops = ours16_tops;
    CHECK_CUDA(cudaMemset(c0, 0xFF, m * n * 4));
    launch(0);
    r.rel_error = SampledError(sample, ref, n, static_cast<const float*>(c0));
    Report(r, rows);
  };

  // INT8 x INT8.
  {
    const gemmd::Int8Matrix qa = *gemmd::QuantizeInt8(xa.data(), m, k);
    const gemmd::Int8Matrix qb = *gemmd::QuantizeInt8(xb.data(), n, k);
    const int sets = SetsFor(caps, static_cast<double>(m * k + n * k + m * n * 4));
    auto da = UploadSets(qa.values, sets), db = UploadSets(qb.values, sets);
    auto dsa = UploadSets(qa.scales, sets), dsb = UploadSets(qb.scales, sets);
    auto dc = AllocSets(m * n * 4, sets);
    std::vector<double> ref(sample.size() * n);
    for (size_t r = 0; r < sample.size(); ++r) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          acc += int64_t{qa.values[sample[r] * k + kk]} * qb.values[j * k + kk];
        }
        ref[r * n + j] = static_cast<double>(acc) * qa.scales[sample[r]] * qb.scales[j];
      }
    }
    SquareRow base{shape, "cuBLAS GemmEx 8I->32I (COMPUTE_32I)", "INT8 x INT8", ""};
    const int32_t one = 1, zero = 0;
    auto cublas = [&](int set) {
      CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), static_cast<int>(k), &one, db[set].p,
                                CUDA_R_8I, static_cast<int>(k), da[set].p, CUDA_R_8I,
                                static_cast<int>(k), &zero, dc[set].p, CUDA_R_32I,
                                static_cast<int>(n), CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    };
    base.ms = MedianMs(o, sets, cublas);
    base.tops = base.baseline_tops = tops(base.ms);
    {  // cuBLAS's int32 sums times the scales, as a check of the reference itself
      cublas(0);
      CHECK_CUDA(cudaDeviceSynchronize());
      std::vector<int32_t> acc(n);
      std::vector<float> scaled(sample.size() * n);
      for (size_t r = 0; r < sample.size(); ++r) {
        CHECK_CUDA(cudaMemcpy(acc.data(), static_cast<int32_t*>(dc[0].p) + sample[r] * n, n * 4,
                              cudaMemcpyDeviceToHost));
        for (int64_t j = 0; j < n; ++j) {
          scaled[r * n + j] = static_cast<float>(acc[j]) * (qa.scales[sample[r]] * qb.scales[j]);
        }
      }
      base.rel_error = gemmd::RelativeError(ref.data(), scaled.data(), DataType::kFloat32,
                                            static_cast<int64_t>(scaled.size()));
    }
    Report(base, rows);
    for (SquareMmaPath path : SquarePaths()) {
      auto ours = [&](int set) {
        const DeviceQuantizedWeight a{QuantFormat::kInt8, da[set].p, dsa[set].p, 1.0f, m, k};
        const DeviceQuantizedWeight b{QuantFormat::kInt8, db[set].p, dsb[set].p, 1.0f, n, k};
        check(gemmd::gpu::LaunchSquareQuantizedGemm(a, b, static_cast<float*>(dc[set].p),
                                                    nullptr, path),
              "int8 square");
      };
      SquareRow r{shape, gemmd::gpu::SquareKernelName(QuantFormat::kInt8, false, path),
                  "INT8 x INT8", "cuBLAS INT8"};
      r.ms = MedianMs(o, sets, ours);
      r.tops = tops(r.ms);
      r.baseline_tops = base.tops;
      CHECK_CUDA(cudaMemset(dc[0].p, 0xFF, m * n * 4));
      ours(0);
      r.rel_error = SampledError(sample, ref, n, static_cast<const float*>(dc[0].p));
      Report(r, rows);
    }
  }

  // FP16 baselines on fp16(xa), fp16(xb): cuBLAS and our FP16 path.
  std::vector<uint16_t> a16(xa.size()), b16(xb.size());
  for (size_t i = 0; i < xa.size(); ++i) a16[i] = gemmd::FloatToHalfBits(xa[i]);
  for (size_t i = 0; i < xb.size(); ++i) b16[i] = gemmd::FloatToHalfBits(xb[i]);
  const int sets16 = SetsFor(caps, static_cast<double>(2 * (m * k + n * k) + 4 * m * n));
  auto da16 = UploadSets(a16, sets16), db16 = UploadSets(b16, sets16);
  auto dc16 = AllocSets(m * n * 4, sets16);
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_b = true;
  p.a_type = p.b_type = DataType::kFloat16;
  p.precision = Precision::kFp16Tensor;
  SquareRow cub{shape, "cuBLAS GemmEx FP16->FP32", "FP16 x FP16", ""};
  cub.ms = MedianMs(o, sets16, [&](int set) {
    CublasRun(handle, p, DataType::kFloat16, da16[set].p, db16[set].p,
              static_cast<float*>(dc16[set].p));
  });
  cub.tops = cub.baseline_tops = tops(cub.ms);
  Report(cub, rows);
  // Our FP16 path on the same operands (the kernel SelectKernel picks for FP16 TN): every
  // FP16 and NVFP4 row's second baseline.
  {
    const absl::StatusOr<const GpuGemmKernel*> ours16 = gemmd::gpu::SelectKernel(p, caps);
    check(ours16.status(), "SelectKernel (FP16 TN)");
    const GpuGemmKernel* kernel = *ours16;
    const std::string name(kernel->name());
    const size_t ws_bytes = kernel->WorkspaceBytes(p);
    DevMem ws(ws_bytes);
    SquareRow r{shape, name + " (our FP16 path)", "FP16 x FP16", "cuBLAS FP16"};
    r.ms = MedianMs(o, sets16, [&](int set) {
      check(kernel->Launch(p, GemmOperands{da16[set].p, db16[set].p, nullptr, dc16[set].p}, ws.p,
                           ws_bytes, nullptr),
            name.c_str());
    });
    r.tops = tops(r.ms);
    r.baseline_tops = cub.tops;
    ours16_tops = r.tops;
    r.ours16_tops = ours16_tops;
    Report(r, rows);
  }

  // NVFP4 B, with NVFP4 A and with FP16 A (the baselines' fp16(xa)).
  const gemmd::Nvfp4Matrix qa = *gemmd::QuantizeNvfp4(xa.data(), m, k);
  const gemmd::Nvfp4Matrix qb = *gemmd::QuantizeNvfp4(xb.data(), n, k);
  std::vector<float> a_deq(xa.size()), b_deq(xb.size()), a16f(xa.size());
  (void)gemmd::DequantizeNvfp4(qa, a_deq.data());
  (void)gemmd::DequantizeNvfp4(qb, b_deq.data());
  for (size_t i = 0; i < a16.size(); ++i) a16f[i] = gemmd::HalfBitsToFloat(a16[i]);
  const int sets4 = SetsFor(caps, static_cast<double>(2 * gemmd::Nvfp4Bytes(m, k) + 4 * m * n));
  auto dpa = UploadSets(qa.packed, sets4), dpb = UploadSets(qb.packed, sets4);
  auto dsa = UploadSets(qa.block_scales, sets4), dsb = UploadSets(qb.block_scales, sets4);
  auto dc4 = AllocSets(m * n * 4, sets4);
  for (bool fp16_a : {false, true}) {
   for (SquareMmaPath path : SquarePaths()) {
    const int sets = fp16_a ? std::min(sets4, sets16) : sets4;
    auto launch = [&](int set) {
      const DeviceQuantizedWeight b{QuantFormat::kNvfp4, dpb[set].p, dsb[set].p, qb.tensor_scale,
                                    n, k};
      float* c = static_cast<float*>(dc4[set].p);
      if (fp16_a) {
        check(gemmd::gpu::LaunchSquareFp16Nvfp4Gemm(da16[set].p, m, k, b, c, nullptr, path),
              "fp16 x nvfp4 square");
      } else {
        const DeviceQuantizedWeight a{QuantFormat::kNvfp4, dpa[set].p, dsa[set].p,
                                      qa.tensor_scale, m, k};
        check(gemmd::gpu::LaunchSquareQuantizedGemm(a, b, c, nullptr, path), "nvfp4 square");
      }
    };
    time_and_check({shape, gemmd::gpu::SquareKernelName(QuantFormat::kNvfp4, fp16_a, path),
                    fp16_a ? "FP16 x NVFP4" : "NVFP4 x NVFP4", "cuBLAS FP16"},
                   sets, launch, cub.tops, dc4[0].p,
                   DenseRefRows(sample, fp16_a ? a16f.data() : a_deq.data(), b_deq.data(), n, k));
   }
  }

  // FP16 A against NVFP4 and INT8 B, and NVFP4 A against NVFP4 B, B in the swap-AB layout
  // (quant_prepack.h), prepacked on the host as an upload would: what a resident weight's
  // calls run, against cuBLAS FP16.
  if (!gemmd::gpu::ResolveSwapAbPath(gemmd::gpu::SwapAbPath::kWgmma).ok() ||
      !gemmd::Nvfp4SwapAbFits(n, k)) {
    return;
  }
  for (int variant : {0, 1, 2}) {
    const bool int8 = variant == 1, nvfp4_a = variant == 2;
    std::vector<uint8_t> packed;
    std::vector<float> w_deq(xb.size());
    float tensor_scale = 1.0f;
    if (int8) {
      const gemmd::Int8Matrix q = *gemmd::QuantizeInt8(xb.data(), n, k);
      gemmd::DequantizeInt8(q, w_deq.data());
      packed.resize(q.values.size() + 4 * q.scales.size());
      check(gemmd::PrepackInt8SwapAb(q.values.data(),
                                     reinterpret_cast<const uint8_t*>(q.scales.data()), n, k,
                                     packed.data()),
            "int8 swap-AB prepack");
    } else {
      w_deq = b_deq;
      packed.resize(qb.packed.size() + qb.block_scales.size());
      check(
          gemmd::PrepackNvfp4SwapAb(qb.packed.data(), qb.block_scales.data(), n, k, packed.data()),
          "nvfp4 swap-AB prepack");
      tensor_scale = qb.tensor_scale;
    }
    const int sets = std::min(
        {sets16, nvfp4_a ? sets4 : sets16, SetsFor(caps, static_cast<double>(packed.size()))});
    auto dw = UploadSets(packed, sets);
    const std::vector<double> ref =
        DenseRefRows(sample, nvfp4_a ? a_deq.data() : a16f.data(), w_deq.data(), n, k);
    // The defaults (all knobs 0); 128 tokens a block (a band of weight rows), or 256 (half a
    // band, one set a consumer); a block an item or persistent blocks; C from the registers
    // or by TMA. NVFP4 A is expanded to FP16 first (into one buffer, each call), for the
    // FP16 A kernel.
    struct Knobs {
      int tokens, grid, store;
    };
    DevMem a_half(nvfp4_a ? gemmd::gpu::Nvfp4HalfBytes(m, k) : 0);
    for (const Knobs& knobs : {Knobs{0, 0, 0}, Knobs{128, 1, 1}, Knobs{256, 1, 1}, Knobs{256, 2, 1},
                               Knobs{256, 1, 2}, Knobs{256, 2, 2}}) {
      auto launch = [&](int set) {
        float* c = static_cast<float*>(dc16[set].p);
        gemmd::gpu::SwapAbOptions options{gemmd::gpu::SwapAbPath::kWgmma};
        options.square_tokens = knobs.tokens;
        options.square_grid = knobs.grid;
        options.square_store = knobs.store;
        check(nvfp4_a ? gemmd::gpu::LaunchSwapAbNvfp4xNvfp4(dpa[set].p, dsa[set].p, qa.tensor_scale,
                                                            m, dw[set].p, tensor_scale, n, k, c,
                                                            a_half.p, nullptr, options)
              : int8  ? gemmd::gpu::LaunchSwapAbInt8(da16[set].p, m, dw[set].p, n, k, c, nullptr,
                                                     options)
                      : gemmd::gpu::LaunchSwapAbNvfp4(da16[set].p, m, dw[set].p, tensor_scale, n, k,
                                                      c, nullptr, options),
              "swap-AB square");
      };
      time_and_check(
          {shape,
           (nvfp4_a ? std::string("swapab_nvfp4xnvfp4_wgmma")
                    : gemmd::gpu::SwapAbKernelName(int8, gemmd::gpu::SwapAbPath::kWgmma)) +
               " (swap-AB layout, " +
               (knobs.tokens == 0 ? std::string("the defaults")
                                  : std::to_string(knobs.tokens) + " tokens" +
                                        (knobs.grid == 2 ? ", persistent" : "") +
                                        (knobs.store == 2 ? ", TMA store" : "")) +
               (nvfp4_a ? ", A expanded to FP16 first)" : ")"),
           nvfp4_a ? "NVFP4 x NVFP4"
           : int8  ? "FP16 x INT8"
                   : "FP16 x NVFP4",
           "cuBLAS FP16"},
          sets, launch, cub.tops, dc16[0].p, ref);
    }
  }
}

void PrintSquareTable(const DeviceCaps& caps, const std::vector<SquareRow>& rows,
                      std::ostream& out) {
  out << "\nSquare quantized GEMM on " << caps.name
      << " (median of CUDA-event times; TN: "
         "A [M,K], B [N,K]; T/s = TOP/s for INT8, TFLOP/s otherwise; error on 4 rows of C vs "
         "FP64 on the dequantized operands)\n\n"
         "| shape | kernel | operands | ms | T/s | baseline | baseline T/s | of baseline | "
         "of our FP16 path | rel. error |\n|---|---|---|---:|---:|---|---:|---:|---:|---|\n";
  for (const SquareRow& r : rows) {
    char line[640];
    std::snprintf(
        line, sizeof(line), "| %s | %s | %s | %.4f | %.1f | %s | %.1f | %s | %s | %s |\n",
        r.shape.c_str(), r.kernel.c_str(), r.operands.c_str(), r.ms, r.tops,
        r.baseline.empty() ? "-" : r.baseline.c_str(), r.baseline_tops,
        r.baseline.empty() ? "-" : (Fixed(100.0 * r.tops / r.baseline_tops, 1) + "%").c_str(),
        r.ours16_tops > 0 ? (Fixed(100.0 * r.tops / r.ours16_tops, 1) + "%").c_str() : "-",
        Sci(r.rel_error).c_str());
    out << line;
  }
}

void PrintTable(const DeviceCaps& caps, const std::vector<Row>& rows, std::ostream& out) {
  out << "\ngemm-bench on " << caps.name << " (sm_" << caps.compute_capability << ", "
      << caps.sm_count << " SMs): median of timed runs; * = SelectKernel's choice\n";
  out << "| shape | path | kernel | ms | TFLOP/s | cuBLAS TFLOP/s | of cuBLAS | rel. error | checked |\n";
  out << "|---|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const Row& r : rows) {
    out << "| " << r.shape << " | " << r.path << " | " << r.kernel << (r.selected ? " *" : "")
        << " | " << Fixed(r.ms, 4) << " | " << Fixed(r.tflops, 2) << " | "
        << Fixed(r.cublas_tflops, 2) << " | "
        << (r.is_cublas ? std::string("1.00") : Fixed(r.tflops / r.cublas_tflops, 2)) << " | "
        << Sci(r.rel_error) << " | " << r.checked << " |\n";
  }
}

void WriteCsv(const std::vector<Row>& rows, std::ostream& out) {
  out << "group,shape,path,kernel,selected,ms,tflops,cublas_tflops,fraction_of_cublas,rel_error,checked\n";
  for (const Row& r : rows) {
    out << r.group << "," << r.shape << "," << r.path << "," << r.kernel << ","
        << (r.selected ? 1 : 0) << "," << r.ms << "," << r.tflops << "," << r.cublas_tflops
        << "," << r.tflops / r.cublas_tflops << "," << r.rel_error << "," << r.checked << "\n";
  }
}

void WriteJson(const DeviceCaps& caps, const Options& o, const std::vector<Row>& rows,
               std::ostream& out) {
  out << "{\n  \"device\": \"" << caps.name << "\",\n  \"compute_capability\": "
      << caps.compute_capability << ",\n  \"sm_count\": " << caps.sm_count
      << ",\n  \"iters\": " << o.iters << ",\n  \"warmup\": " << o.warmup
      << ",\n  \"seed\": " << o.seed << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << "    {\"group\": \"" << r.group << "\", \"shape\": \"" << r.shape << "\", \"path\": \""
        << r.path << "\", \"kernel\": \"" << r.kernel << "\", \"selected\": "
        << (r.selected ? "true" : "false") << ", \"cublas\": " << (r.is_cublas ? "true" : "false")
        << ", \"ms\": " << r.ms << ", \"tflops\": " << r.tflops
        << ", \"cublas_tflops\": " << r.cublas_tflops
        << ", \"fraction_of_cublas\": " << r.tflops / r.cublas_tflops
        << ", \"rel_error\": " << r.rel_error << ", \"checked\": \"" << r.checked << "\"}"
        << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  CHECK_CUDA(cudaSetDevice(o.device));
  auto caps = gemmd::gpu::QueryDeviceCaps(o.device);
  if (!caps.ok()) {
    std::cerr << caps.status() << "\n";
    return 1;
  }
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // no TF32 for SGEMM
  std::fprintf(stderr, "gemm-bench: %s, sm_%d, %d SMs, L2 %lld MiB; iters %d, warm-up %d\n",
               caps->name.c_str(), caps->compute_capability, caps->sm_count,
               static_cast<long long>(caps->l2_cache_bytes >> 20), o.iters, o.warmup);

  if (!o.square_sizes.empty()) {
    std::vector<SquareRow> square_rows;
    for (int64_t s : o.square_sizes) RunQuantizedSquare(o, *caps, handle, s, o.seed + s, &square_rows);
    cublasDestroy(handle);
    PrintSquareTable(*caps, square_rows, std::cout);
    return 0;
  }
  if (o.quantized) {
    std::vector<QuantRow> quant_rows;
    uint64_t seed = o.seed;
    for (const std::string& name : o.skinny_formats) {
      const gemmd::QuantFormat f =
          name == "int8" ? gemmd::QuantFormat::kInt8 : gemmd::QuantFormat::kNvfp4;
      for (const auto& [n, k] : o.skinny_shapes) {
        const SkinnyWeight w = MakeSkinnyWeight(o, *caps, f, n, k, ++seed);
        for (int64_t m : o.skinny_m) {
          RunQuantizedSkinny(o, *caps, handle, w, m, ++seed, &quant_rows);
        }
      }
    }
    cublasDestroy(handle);
    PrintQuantTable(quant_rows, std::cout);
    return 0;
  }

  std::vector<Row> rows;
  std::vector<CopyRow> copy_rows;
  uint64_t index = 0;
  for (const Workload& w : DefaultWorkloads()) {
    ++index;
    const std::string label = w.group + " " + w.Shape() + " " + w.Path();
    if (!o.filter.empty()) {
      // Comma-separated substrings of "group shape path"; any one selects the workload.
      bool match = false;
      std::stringstream list(o.filter);
      for (std::string item; std::getline(list, item, ',');) {
        match = match || (!item.empty() && label.find(item) != std::string::npos);
      }
      if (!match) continue;
    }
    RunWorkload(o, *caps, handle, w, o.seed + index, &rows);
    if (o.with_copies) RunWithCopies(o, *caps, w, o.seed + index, &copy_rows);
  }
  cublasDestroy(handle);

  if (o.csv) {
    if (o.csv_file.empty()) {
      WriteCsv(rows, std::cout);
    } else {
      std::ofstream f(o.csv_file);
      WriteCsv(rows, f);
    }
  }
  if (o.json) {
    if (o.json_file.empty()) {
      WriteJson(*caps, o, rows, std::cout);
    } else {
      std::ofstream f(o.json_file);
      WriteJson(*caps, o, rows, f);
    }
  }
  if ((!o.csv || !o.csv_file.empty()) && (!o.json || !o.json_file.empty())) {
    PrintTable(*caps, rows, std::cout);
    if (!copy_rows.empty()) PrintCopyTable(copy_rows, std::cout);
  }
  return 0;
}
