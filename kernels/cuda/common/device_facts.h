// What the skinny quantized launchers need to know about the current GPU, queried from
// the driver once per device and cached: a kernel of ~12 us cannot afford a driver query
// per launch. Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_COMMON_DEVICE_FACTS_H_
#define GEMMD_KERNELS_CUDA_COMMON_DEVICE_FACTS_H_

#include "absl/status/statusor.h"

namespace gemmd::gpu {

struct DeviceFacts {
  int device = 0;              // the current device's ordinal
  int sms = 0;                 // streaming multiprocessors
  int major = 0;               // compute capability major
  int smem_optin = 0;          // most dynamic shared memory a block may opt in to (bytes)
  bool cluster_launch = false; // thread-block clusters can be launched
};

// The current device's facts (cudaGetDevice, then the cache); INTERNAL for CUDA errors.
absl::StatusOr<DeviceFacts> CurrentDeviceFacts();

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_COMMON_DEVICE_FACTS_H_
