// Launches that split K over a thread-block cluster along grid y and add the blocks'
// sums through distributed shared memory (the streaming skinny kernel, the wgmma swap-AB
// kernel): their launch configuration, and how far the split may go while every cluster
// of the grid fits the GPU at once. Host-only header; included by .cu files.
#ifndef GEMMD_KERNELS_CUDA_COMMON_SPLIT_K_CLUSTER_H_
#define GEMMD_KERNELS_CUDA_COMMON_SPLIT_K_CLUSTER_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/cuda/common/cuda_status.h"

namespace gemmd::gpu::internal {

inline constexpr int kClusterCacheDevices = 64;
inline constexpr int kMaxClusterSplit = 8;  // the portable cluster size

// Per device and split: the clusters that fit at once (0: not asked yet, -1: none). A
// caller keeps one per kernel, as a function-local static.
using ClusterFitCache = std::atomic<int>[kClusterCacheDevices][kMaxClusterSplit + 1];

// blocks_x x splits blocks of `threads`, K split over clusters of `splits` along y (no
// cluster attribute for 1); `cluster` holds the attribute the config points to.
inline cudaLaunchConfig_t SplitKClusterConfig(int64_t blocks_x, int64_t splits, int threads,
                                              size_t smem, cudaStream_t stream,
                                              cudaLaunchAttribute* cluster) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cluster->id = cudaLaunchAttributeClusterDimension;
  cluster->val.clusterDim.x = 1;
  cluster->val.clusterDim.y = static_cast<unsigned>(splits);
  cluster->val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = splits > 1 ? 1 : 0;
  return config;
}

// `splits` (at most kMaxClusterSplit), halved until blocks_x clusters of it fit the GPU at
// once; 1 at the least. Each device's answer per split is asked once (`cache`).
template <typename Kernel>
absl::StatusOr<int64_t> SplitThatFits(Kernel kernel, int64_t blocks_x, int64_t splits, int threads,
                                      size_t smem, int device, ClusterFitCache& cache) {
  const bool cacheable = device >= 0 && device < kClusterCacheDevices;
  for (; splits > 1; splits /= 2) {
    int clusters = cacheable ? cache[device][splits].load(std::memory_order_relaxed) : 0;
    if (clusters == 0) {
      cudaLaunchAttribute cluster;
      const cudaLaunchConfig_t config =
          SplitKClusterConfig(blocks_x, splits, threads, smem, /*stream=*/nullptr, &cluster);
      RETURN_IF_CUDA_ERROR(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
      clusters = std::max(clusters, -1);
      if (cacheable) cache[device][splits].store(clusters == 0 ? -1 : clusters);
    }
    if (clusters >= blocks_x) break;
  }
  return splits;
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_COMMON_SPLIT_K_CLUSTER_H_
