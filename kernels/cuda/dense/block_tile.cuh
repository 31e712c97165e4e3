// Where one block of a dense tiled kernel (sgemm_simt.cu, hgemm_wmma.cu) works: its
// BM x BN output tile (swizzled so neighbouring blocks share B columns in L2), its K slice
// (grid.y: split-K) and its batch item (grid.z). .cu files only.
#ifndef GEMMD_KERNELS_CUDA_DENSE_BLOCK_TILE_CUH_
#define GEMMD_KERNELS_CUDA_DENSE_BLOCK_TILE_CUH_

#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu::internal {

struct BlockTile {
  int m0, n0;          // the tile's first row and column of C
  int split, item;     // K slice and batch item
  int k_begin, k_end;  // the slice's K range
  int num_k;           // BK steps in it
};

template <int BM, int BN, int BK>
__device__ __forceinline__ BlockTile BlockTileOf(const TileArgs& args) {
  const int tiles_m = (args.m + BM - 1) / BM;
  const int tiles_n = (args.n + BN - 1) / BN;
  int tile_m, tile_n;
  SwizzleTile<8>(blockIdx.x, tiles_m, tiles_n, &tile_m, &tile_n);
  BlockTile t;
  t.m0 = tile_m * BM;
  t.n0 = tile_n * BN;
  t.split = blockIdx.y;
  t.item = blockIdx.z;
  t.k_begin = t.split * args.k_per_split;
  t.k_end = min(args.k, t.k_begin + args.k_per_split);
  t.num_k = t.k_end > t.k_begin ? (t.k_end - t.k_begin + BK - 1) / BK : 0;
  return t;
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_DENSE_BLOCK_TILE_CUH_
