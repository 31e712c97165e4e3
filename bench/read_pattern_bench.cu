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
// p5: a block-wide cp.async ring over R rows x the block's K range (grid.y splits K),
// each stage R rows x SK values (SK/2 bytes of codes per row, SK/16 of scales) plus, with
// A, 16 FP16 rows x SK values of a 256 KB activation matrix (L2-resident).
#include <cuda.h>
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

__device__ __forceinline__ void cp16(void* smem, const void* g) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(g));
}
template <int R, int SK, int S, bool kA>
__global__ void __launch_bounds__(256)
    p5(const uint8_t* d, const uint8_t* s, const uint8_t* a, unsigned* out) {
  extern __shared__ uint4 sm[];
  constexpr int kCode = R * SK / 2, kScale = R * SK / 16, kAB = kA ? 16 * SK * 2 : 0;
  constexpr int kStage = kCode + kScale + kAB;
  uint8_t* ring = reinterpret_cast<uint8_t*>(sm);
  const size_t r0 = size_t{blockIdx.x} * R;
  const int k_per = RB * 2 / gridDim.y, kb0 = blockIdx.y * k_per;  // values
  unsigned acc = 0;
  auto issue = [&](int kb, int st) {
    if (kb < kb0 + k_per) {
      uint8_t* stage = ring + st * kStage;
      for (int i = threadIdx.x; i < kCode / 16; i += 256) {
        const int r = i / (SK / 32), q = i % (SK / 32);
        cp16(stage + i * 16, d + (r0 + r) * RB + kb / 2 + q * 16);
      }
      for (int i = threadIdx.x; i < kScale / 16; i += 256) {
        const int r = i / (SK / 256), q = i % (SK / 256);
        cp16(stage + kCode + i * 16, s + (r0 + r) * SB + kb / 16 + q * 16);
      }
      if (kA) {
        for (int i = threadIdx.x; i < kAB / 16; i += 256) {
          const int r = i / (SK / 8), q = i % (SK / 8);
          cp16(stage + kCode + kScale + i * 16, a + (static_cast<size_t>(r) * RB * 2 + kb) * 2 + q * 16);
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  for (int st = 0; st < S - 1; ++st) issue(kb0 + st * SK, st);
  int st = 0;
  for (int kb = kb0; kb < kb0 + k_per; kb += SK) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2) : "memory");
    __syncthreads();
    issue(kb + (S - 1) * SK, (st + S - 1) % S);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(ring + st * kStage);
    for (int i = threadIdx.x; i < kStage / 4; i += 256 * 4) acc ^= w[i];
    st = (st + 1) % S;
  }
  if (acc == 0x12345678) out[0] = acc;
}

// p6: the same tiles through a TMA-style ring: one producer warp issues a bulk copy
// (cp.async.bulk) per row piece, completion counted on the stage's mbarrier; kC consumer
// warps wait on it, touch the stage and release it through a second mbarrier. No block
// barrier in the loop. kCluster > 1 launches grid.y's splits as a cluster (scheduling only).
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra W;\n}\n" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}
template <int R, int SK, int S, bool kA, int kC>
__global__ void __launch_bounds__((kC + 1) * 32)
    p6(const uint8_t* d, const uint8_t* s, const uint8_t* a, unsigned* out) {
  extern __shared__ uint4 sm[];
  constexpr int kCode = R * SK / 2, kScale = R * SK / 16, kAB = kA ? 16 * SK * 2 : 0;
  constexpr int kStage = kCode + kScale + kAB;
  __shared__ uint64_t full[S], empty[S];
  uint8_t* ring = reinterpret_cast<uint8_t*>(sm);
  const size_t r0 = size_t{blockIdx.x} * R;
  const int k_per = RB * 2 / gridDim.y, kb0 = blockIdx.y * k_per;  // values
  const int steps = k_per / SK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) mbar_init(&full[i], 1), mbar_init(&empty[i], kC);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == kC) {  // producer
    for (int i = 0; i < steps; ++i) {
      const int st = i % S, kb = kb0 + i * SK;
      if (i >= S) mbar_wait(&empty[st], ((i / S) - 1) & 1);
      if (lane == 0) mbar_expect_tx(&full[st], kStage);
      __syncwarp();
      uint8_t* stage = ring + st * kStage;
      for (int r = lane; r < R; r += 32) {
        bulk_copy(stage + r * (SK / 2), d + (r0 + r) * RB + kb / 2, SK / 2, &full[st]);
        bulk_copy(stage + kCode + r * (SK / 16), s + (r0 + r) * SB + kb / 16, SK / 16, &full[st]);
      }
      if (kA && lane < 16) {
        bulk_copy(stage + kCode + kScale + lane * SK * 2,
                  a + (static_cast<size_t>(lane) * RB * 2 + kb) * 2, SK * 2, &full[st]);
      }
    }
    return;
  }
  unsigned acc = 0;
  for (int i = 0; i < steps; ++i) {
    const int st = i % S;
    mbar_wait(&full[st], (i / S) & 1);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(ring + st * kStage);
    for (int j = threadIdx.x; j < kStage / 4; j += kC * 32 * 4) acc ^= w[j];
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[st]);
  }
  if (acc == 0x12345678) out[0] = acc;
}

// p7: p6 with 2D tensor-map copies (one TMA op per stage and operand) instead of one bulk
// copy per row.
__device__ __forceinline__ void tma2d(void* dst, const CUtensorMap* map, int x, int y,
                                      uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
      : "memory");
}
template <int R, int SK, int S, bool kA, int kC>
__global__ void __launch_bounds__((kC + 1) * 32)
    p7(const __grid_constant__ CUtensorMap dmap, const __grid_constant__ CUtensorMap smap,
       const __grid_constant__ CUtensorMap amap, unsigned* out) {
  extern __shared__ uint4 sm[];
  constexpr int kCode = R * SK / 2, kScale = R * SK / 16, kAB = kA ? 16 * SK * 2 : 0;
  constexpr int kStage = (kCode + kScale + kAB + 1023) / 1024 * 1024;
  __shared__ uint64_t full[S], empty[S];
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(sm) + 1023) & ~uintptr_t{1023});
  const int r0 = blockIdx.x * R;
  const int k_per = RB * 2 / gridDim.y, kb0 = blockIdx.y * k_per;  // values
  const int steps = k_per / SK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) mbar_init(&full[i], 1), mbar_init(&empty[i], kC);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == kC) {  // producer
    if (lane == 0) {
      for (int i = 0; i < steps; ++i) {
        const int st = i % S, kb = kb0 + i * SK;
        if (i >= S) mbar_wait(&empty[st], ((i / S) - 1) & 1);
        mbar_expect_tx(&full[st], kCode + kScale + kAB);
        uint8_t* stage = ring + st * kStage;
        for (int x = 0; x < SK / 2; x += 256) tma2d(stage + x * R, &dmap, kb / 2 + x, r0, &full[st]);
        tma2d(stage + kCode, &smap, kb / 16, r0, &full[st]);
        if (kA) {
          for (int x = 0; x < SK; x += 256) tma2d(stage + kCode + kScale + x * 32, &amap, kb + x, 0, &full[st]);
        }
      }
    }
    return;
  }
  unsigned acc = 0;
  for (int i = 0; i < steps; ++i) {
    const int st = i % S;
    mbar_wait(&full[st], (i / S) & 1);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(ring + st * kStage);
    for (int j = threadIdx.x; j < kStage / 4; j += kC * 32 * 4) acc ^= w[j];
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[st]);
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
  uint8_t* act;
  CK(cudaMalloc(&act, 16 * RB * 2 * 2));  // 16 FP16 rows of K = 2 * RB values
  CK(cudaMemset(act, 0x3c, 16 * RB * 2 * 2));
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
  auto p5run = [&](const char* name, auto kernel, int rows, int stage_bytes, int stages,
                   int splits) {
    const int smem = stage_bytes * stages;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    time(name, [&](int k) {
      kernel<<<dim3(N / rows, splits), 256, smem>>>(d[k], s[k], act, out);
    });
  };
#define P5(R, SK, S, A, SPLITS)                                                              \
  p5run("p5 R" #R " SK" #SK " S" #S " A" #A " y" #SPLITS, p5<R, SK, S, A>, R,              \
        R * SK / 2 + R * SK / 16 + (A ? 16 * SK * 2 : 0), S, SPLITS)
  P5(64, 256, 4, false, 1);
  P5(64, 256, 4, true, 1);
  P5(64, 256, 6, true, 1);
  P5(64, 512, 4, true, 1);
  P5(64, 512, 3, true, 1);
  P5(128, 256, 4, true, 2);
  P5(128, 256, 6, true, 2);
  P5(128, 512, 3, true, 2);
  P5(32, 1024, 3, false, 1);
  P5(256, 256, 3, true, 4);
  auto p6run = [&](const char* name, auto kernel, int rows, int stage_bytes, int stages,
                   int splits, int consumers, bool cluster) {
    const int smem = stage_bytes * stages;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(N / rows, splits);
    cfg.blockDim = dim3((consumers + 1) * 32);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = splits;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = cluster ? 1 : 0;
    if (cluster) {
      int clusters = 0;
      CK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
      printf("  (%s: %d clusters of %d fit at once, %d launched)\n", name, clusters, splits,
             N / rows);
    }
    time(name, [&](int k) {
      CK(cudaLaunchKernelEx(&cfg, kernel, (const uint8_t*)d[k], (const uint8_t*)s[k],
                            (const uint8_t*)act, out));
    });
  };
#define P6(R, SK, S, A, SPLITS, C, CL)                                                       \
  p6run("p6 R" #R " SK" #SK " S" #S " A" #A " y" #SPLITS " c" #C " cl" #CL,                 \
        p6<R, SK, S, A, C>, R, R * SK / 2 + R * SK / 16 + (A ? 16 * SK * 2 : 0), S, SPLITS, C, \
        CL)
  P6(64, 256, 6, true, 1, 8, false);
  P6(64, 512, 4, true, 1, 8, false);
  P6(128, 256, 6, true, 2, 8, false);
  P6(128, 256, 6, true, 2, 8, true);
  P6(128, 512, 3, true, 2, 8, true);
  P6(256, 256, 4, true, 4, 8, false);
  P6(256, 256, 4, true, 4, 8, true);
  P6(256, 256, 3, true, 4, 8, true);
  P6(256, 512, 2, true, 4, 8, true);
  P6(32, 1024, 4, false, 1, 8, false);
  P6(32, 1024, 4, true, 1, 8, false);
  using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q));
  EncodeFn encode = reinterpret_cast<EncodeFn>(fn);
  auto map2d = [&](void* base, CUtensorMapDataType type, uint64_t w, uint64_t h,
                   uint64_t pitch_bytes, uint32_t bw, uint32_t bh) {
    CUtensorMap m;
    cuuint64_t dims[2] = {w, h}, strides[1] = {pitch_bytes};
    cuuint32_t box[2] = {bw, bh}, es[2] = {1, 1};
    CUresult r = encode(&m, type, 2, base, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) printf("encode failed %d\n", (int)r), exit(1);
    return m;
  };
  auto p7run = [&](const char* name, auto kernel, int rows, int sk, int stage_bytes, int stages,
                   int splits, int consumers) {
    const int smem = (stage_bytes + 1023) / 1024 * 1024 * stages + 1024;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    std::vector<CUtensorMap> dm(kSets), sm(kSets);
    for (int i = 0; i < kSets; ++i) {
      dm[i] = map2d(d[i], CU_TENSOR_MAP_DATA_TYPE_UINT8, RB, N, RB, std::min(sk / 2, 256), rows);
      sm[i] = map2d(s[i], CU_TENSOR_MAP_DATA_TYPE_UINT8, SB, N, SB, sk / 16, rows);
    }
    CUtensorMap am = map2d(act, CU_TENSOR_MAP_DATA_TYPE_UINT16, RB * 2, 16, RB * 4,
                           std::min(sk, 256), 16);
    time(name, [&](int k) {
      kernel<<<dim3(N / rows, splits), (consumers + 1) * 32, smem>>>(dm[k], sm[k], am, out);
    });
  };
#define P7(R, SK, S, A, SPLITS, C)                                                            \
  p7run("p7 R" #R " SK" #SK " S" #S " A" #A " y" #SPLITS " c" #C, p7<R, SK, S, A, C>, R, SK, \
        R * SK / 2 + R * SK / 16 + (A ? 16 * SK * 2 : 0), S, SPLITS, C)
  P7(64, 256, 6, true, 1, 8);
  P7(64, 512, 4, true, 1, 8);
  P7(128, 256, 6, true, 2, 8);
  P7(128, 512, 3, true, 2, 8);
  P7(128, 512, 4, true, 2, 8);
  P7(256, 256, 4, true, 4, 8);
  P7(256, 512, 2, true, 4, 8);
  P7(32, 1024, 4, false, 1, 8);
  P7(32, 1024, 4, true, 1, 8);
  P7(64, 512, 4, true, 1, 4);
  P7(128, 512, 3, true, 2, 4);
  printf("(p4 and memcpy bytes column is misleading: p4 reads %.1f MB, memcpy moves 2x16.8MB)\n",
         (double)N * RB / 1e6);
  return 0;
}
