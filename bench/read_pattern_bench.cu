// Read-pattern microbenchmark (docs/KERNELS.md, "Skinny weight-only"): how fast the
// H200 reads an 8192 x 8192 NVFP4 weight (8192 rows of 4096 bytes, plus 8192 x 512 scale
// bytes) with the access patterns the skinny kernel could use, no decode. Standalone,
// not part of the CMake build:
//   nvcc -std=c++17 -O3 -arch=sm_90 bench/read_pattern_bench.cu -o /tmp/read_pattern_bench
//   /tmp/read_pattern_bench
// p1: the register path's pattern (each 16-byte load instruction: 8 rows x 64 bytes);
// p2: 512 contiguous bytes of one row per warp instruction (the ring's copies);
// p3: 4 rows x 128 bytes; p4: linear; S = loads in flight per thread. 5 buffer sets
// rotate so the 60 MiB L2 does not hold the weight between calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>
#define CK(x)                                                      \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e) {                                                       \
      printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); \
      exit(1);                                                     \
    }                                                              \
  } while (0)
constexpr int N = 8192, RB = 4096, SB = 512;

__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// P1: current pattern. block = 256 thr owns 32 rows; warp w, chunk c = w + 8 i (64 B/row); lane
// (g,t) reads rows g,g+8,g+16,g+24 at c*64 + t*16.
template <int S>
__global__ void __launch_bounds__(256)
    p1(const uint8_t* d, const uint8_t* s, unsigned* out, int use_scales) {
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  size_t r0 = blockIdx.x * 32;
  unsigned acc = 0;
  for (int c = warp; c < RB / 64; c += 8 * S) {
    uint4 v[S][4];
    unsigned sc[S][4];
#pragma unroll
    for (int st = 0; st < S; ++st)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        int cc = c + 8 * st;
        size_t row = r0 + g + 8 * r;
        v[st][r] =
            cc < RB / 64 ? ldg_stream(d + row * RB + cc * 64 + t * 16) : make_uint4(0, 0, 0, 0);
        sc[st][r] = (use_scales && cc < RB / 64)
                        ? __ldg((const unsigned short*)(s + row * SB + cc * 8 + t * 2))
                        : 0;
      }
#pragma unroll
    for (int st = 0; st < S; ++st)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        acc ^= v[st][r].x ^ v[st][r].y ^ v[st][r].z ^ v[st][r].w ^ sc[st][r];
  }
  if (acc == 0x12345678) out[0] = acc;
}
// P2: warp instruction reads one row's 512 contiguous bytes. block owns 32 rows; warp w rows
// 4w..4w+3; S segments in flight.
template <int S>
__global__ void __launch_bounds__(256)
    p2(const uint8_t* d, const uint8_t* s, unsigned* out, int use_scales) {
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  size_t r0 = blockIdx.x * 32 + warp * 4;
  unsigned acc = 0;
  // 4 rows x 8 segments of 512 B = 32 loads per lane
  for (int i = 0; i < 32; i += S) {
    uint4 v[S];
#pragma unroll
    for (int st = 0; st < S; ++st) {
      int j = i + st;
      v[st] = ldg_stream(d + (r0 + j / 8) * RB + (j % 8) * 512 + lane * 16);
    }
#pragma unroll
    for (int st = 0; st < S; ++st) acc ^= v[st].x ^ v[st].y ^ v[st].z ^ v[st].w;
  }
  if (use_scales) {
    for (int r = 0; r < 4; ++r) acc ^= __ldg((const unsigned*)(s + (r0 + r) * SB + lane * 16));
  }
  if (acc == 0x12345678) out[0] = acc;
}
// P3: 4 rows x 128 B per warp instruction: lane (r = lane/8, q = lane%8): block 32 rows, warp w
// gets column chunks c = w + 8i of 128 B for all 32 rows (8 instrs per chunk).
template <int S>
__global__ void __launch_bounds__(256)
    p3(const uint8_t* d, const uint8_t* s, unsigned* out, int use_scales) {
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 8, q = lane % 8;
  size_t r0 = blockIdx.x * 32;
  unsigned acc = 0;
  for (int c = warp; c < RB / 128; c += 8 * S) {
    uint4 v[S][8];
#pragma unroll
    for (int st = 0; st < S; ++st)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        int cc = c + 8 * st;
        v[st][j] = cc < RB / 128 ? ldg_stream(d + (r0 + j * 4 + r) * RB + cc * 128 + q * 16)
                                 : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int st = 0; st < S; ++st)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc ^= v[st][j].x ^ v[st][j].y ^ v[st][j].z ^ v[st][j].w;
  }
  if (acc == 0x12345678) out[0] = acc;
}
// P4: linear grid-stride over everything, S loads in flight.
template <int S>
__global__ void p4(const uint8_t* d, size_t bytes, unsigned* out) {
  size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 16,
         stride = (size_t)gridDim.x * blockDim.x * 16;
  unsigned acc = 0;
  for (; i < bytes; i += S * stride) {
    uint4 v[S];
#pragma unroll
    for (int st = 0; st < S; ++st)
      v[st] = i + st * stride < bytes ? ldg_stream(d + i + st * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int st = 0; st < S; ++st) acc ^= v[st].x ^ v[st].y ^ v[st].z ^ v[st].w;
  }
  if (acc == 0x12345678) out[0] = acc;
}

int main() {
  const int kSets = 5;
  std::vector<uint8_t*> d(kSets), s(kSets);
  for (int i = 0; i < kSets; ++i) {
    CK(cudaMalloc(&d[i], (size_t)N * RB));
    CK(cudaMalloc(&s[i], (size_t)N * SB));
    CK(cudaMemset(d[i], i + 1, (size_t)N * RB));
    CK(cudaMemset(s[i], 0x38, (size_t)N * SB));
  }
  unsigned* out;
  CK(cudaMalloc(&out, 4));
  auto time = [&](const char* name, auto launch) {
    for (int i = 0; i < 10; ++i) launch(i % kSets);
    const int it = 50;
    std::vector<cudaEvent_t> ev(2 * it);
    for (auto& e : ev) cudaEventCreate(&e);
    for (int i = 0; i < it; ++i) {
      cudaEventRecord(ev[2 * i]);
      launch(i % kSets);
      cudaEventRecord(ev[2 * i + 1]);
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> ms(it);
    for (int i = 0; i < it; ++i) cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]);
    std::sort(ms.begin(), ms.end());
    double bytes = (double)N * (RB + SB);
    printf("%-28s %8.4f ms  %6.0f GB/s (data+scales %.1f MB)\n", name, ms[it / 2],
           bytes / ms[it / 2] / 1e6, bytes / 1e6);
  };
  time("p1 S1 scales", [&](int k) { p1<1><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p1 S2 scales", [&](int k) { p1<2><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p1 S4 scales", [&](int k) { p1<4><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p1 S2 noscales", [&](int k) { p1<2><<<N / 32, 256>>>(d[k], s[k], out, 0); });
  time("p2 S2", [&](int k) { p2<2><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p2 S4", [&](int k) { p2<4><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p2 S8", [&](int k) { p2<8><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p3 S1", [&](int k) { p3<1><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p3 S2", [&](int k) { p3<2><<<N / 32, 256>>>(d[k], s[k], out, 1); });
  time("p4 S4 grid 132x4x256", [&](int k) { p4<4><<<132 * 4, 256>>>(d[k], (size_t)N * RB, out); });
  time("p4 S8 grid 132x4x256", [&](int k) { p4<8><<<132 * 4, 256>>>(d[k], (size_t)N * RB, out); });
  time("p4 S4 grid 132x8x256", [&](int k) { p4<4><<<132 * 8, 256>>>(d[k], (size_t)N * RB, out); });
  time("cudaMemcpy D2D 33.5MB", [&](int k) {
    cudaMemcpyAsync(d[(k + 1) % kSets], d[k], (size_t)N * RB / 2, cudaMemcpyDeviceToDevice);
  });
  printf("(p4 and memcpy bytes column is misleading: p4 reads %.1f MB, memcpy moves 2x16.8MB)\n",
         (double)N * RB / 1e6);
  return 0;
}
