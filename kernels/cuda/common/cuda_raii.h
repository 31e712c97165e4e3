// RAII owners for CUDA runtime objects: the current device, device memory, streams and
// events. Host-only; compiles with g++ (needs only <cuda_runtime_api.h>).
//
// Each owner is move-only and releases its object in the destructor (errors on release
// are ignored: a destructor has nowhere to report them, and a faulted context fails the
// next checked call anyway). Construction goes through static Create/Allocate functions
// that return absl::StatusOr (INTERNAL with the CUDA error on failure). None of these
// objects is thread-safe; use one per thread or guard it.
#ifndef GEMMD_KERNELS_CUDA_COMMON_CUDA_RAII_H_
#define GEMMD_KERNELS_CUDA_COMMON_CUDA_RAII_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/common/cuda_status.h"

namespace gemmd::gpu {

// Makes `device` current for the scope and restores the previous device afterwards.
class ScopedDevice {
 public:
  static absl::StatusOr<ScopedDevice> Create(int device) {
    int previous = 0;
    RETURN_IF_CUDA_ERROR(cudaGetDevice(&previous));
    RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
    return ScopedDevice(previous);
  }
  ScopedDevice(ScopedDevice&& other) noexcept
      : previous_(std::exchange(other.previous_, -1)) {}
  ScopedDevice& operator=(ScopedDevice&&) = delete;
  ScopedDevice(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  explicit ScopedDevice(int previous) : previous_(previous) {}
  int previous_;
};

// Device memory from cudaMalloc (256-byte aligned) on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) {
    void* ptr = nullptr;
    if (bytes > 0) RETURN_IF_CUDA_ERROR(cudaMalloc(&ptr, bytes));
    return DeviceBuffer(ptr, bytes);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  void Reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

 private:
  DeviceBuffer(void* ptr, size_t bytes) : ptr_(ptr), bytes_(bytes) {}
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream on the current device.
class CudaStream {
 public:
  static absl::StatusOr<CudaStream> Create() {
    cudaStream_t stream = nullptr;
    RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return CudaStream(stream);
  }
  CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& other) noexcept {
    if (this != &other) {
      if (stream_ != nullptr) cudaStreamDestroy(stream_);
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }

 private:
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream_ = nullptr;
};

// A timing event on the current device.
class CudaEvent {
 public:
  static absl::StatusOr<CudaEvent> Create() {
    cudaEvent_t event = nullptr;
    RETURN_IF_CUDA_ERROR(cudaEventCreate(&event));
    return CudaEvent(event);
  }
  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept {
    if (this != &other) {
      if (event_ != nullptr) cudaEventDestroy(event_);
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  cudaEvent_t get() const { return event_; }

 private:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  cudaEvent_t event_ = nullptr;
};

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_COMMON_CUDA_RAII_H_
