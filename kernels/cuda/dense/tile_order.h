// Which output tile a kernel's block computes. Plain arithmetic, host and device, so that it
// is tested without a GPU.
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

// The edge tiles: those of a tiles_m x tiles_n grid outside its first full_m x full_n
// (full_m >= tiles_m - 1, full_n >= tiles_n - 1: at most one partial row and column of
// tiles), for a launch apart from the full tiles'. `id` < tiles_m * tiles_n - full_m * full_n;
// the last column of tiles first (top to bottom), then the last row's other tiles.
GEMMD_TILE_ORDER_FN TileCoord EdgeTile(int id, int tiles_m, int tiles_n, int full_m, int full_n) {
  const int column = tiles_n > full_n ? tiles_m : 0;
  if (id < column) return TileCoord{id, full_n};
  return TileCoord{full_m, id - column};
}

}  // namespace gemmd::gpu::internal

#undef GEMMD_TILE_ORDER_FN

#endif  // GEMMD_KERNELS_CUDA_DENSE_TILE_ORDER_H_
