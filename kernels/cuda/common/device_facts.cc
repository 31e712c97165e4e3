#include "kernels/cuda/common/device_facts.h"

#include <cuda_runtime_api.h>

#include <atomic>

#include "kernels/cuda/common/cuda_status.h"

namespace gemmd::gpu {
namespace {

constexpr int kMaxCachedDevices = 64;

}  // namespace

absl::StatusOr<DeviceFacts> CurrentDeviceFacts() {
  // `sms` is published last (release) and read first (acquire): a reader that sees it
  // sees the rest. Concurrent first callers store the same values.
  static std::atomic<int> cached_sms[kMaxCachedDevices] = {};
  static std::atomic<int> cached_major[kMaxCachedDevices] = {};
  static std::atomic<int> cached_smem[kMaxCachedDevices] = {};
  static std::atomic<int> cached_cluster[kMaxCachedDevices] = {};
  DeviceFacts f;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&f.device));
  const int d = f.device;
  const bool cacheable = d >= 0 && d < kMaxCachedDevices;
  if (cacheable) {
    f.sms = cached_sms[d].load(std::memory_order_acquire);
    if (f.sms > 0) {
      f.major = cached_major[d].load(std::memory_order_relaxed);
      f.smem_optin = cached_smem[d].load(std::memory_order_relaxed);
      f.cluster_launch = cached_cluster[d].load(std::memory_order_relaxed) != 0;
      return f;
    }
  }
  int cluster = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, d));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, d));
  RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, d));
  f.cluster_launch = cluster != 0;
  if (cacheable) {
    cached_major[d].store(f.major, std::memory_order_relaxed);
    cached_smem[d].store(f.smem_optin, std::memory_order_relaxed);
    cached_cluster[d].store(cluster, std::memory_order_relaxed);
    cached_sms[d].store(f.sms, std::memory_order_release);
  }
  return f;
}

}  // namespace gemmd::gpu
