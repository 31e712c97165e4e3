// The order in which a kernel's blocks take their output tiles: in groups of `group_m` tile
// rows, down each column of the group (the last group may have fewer rows), so that the
// blocks resident together read fewer distinct rows of A and columns of B from L2 than
// row by row. Plain arithmetic, host and device, so that it is tested without a GPU.
#ifndef GEMMD_KERNELS_CUDA_DENSE_TILE_ORDER_H_
#define GEMMD_KERNELS_CUDA_DENSE_TILE_ORDER_H_

#if defined(__CUDACC__)
#define GEMMD_TILE_ORDER_FN __host__ __device__ inline
#else
#define GEMMD_TILE_ORDER_FN inline
#endif

namespace gemmd::gpu::internal {

struct TileCoord {
  int m = 0, n = 0;
};

// The tile block `id` (0 <= id < tiles_m * tiles_n, in launch order) computes.
GEMMD_TILE_ORDER_FN TileCoord GroupedTile(int id, int tiles_m, int tiles_n, int group_m) {
  const int group = id / (group_m * tiles_n), first = group * group_m;
  const int rows = tiles_m - first < group_m ? tiles_m - first : group_m;
  const int in_group = id - group * group_m * tiles_n;
  return TileCoord{first + in_group % rows, in_group / rows};
}

}  // namespace gemmd::gpu::internal

#undef GEMMD_TILE_ORDER_FN

#endif  // GEMMD_KERNELS_CUDA_DENSE_TILE_ORDER_H_
