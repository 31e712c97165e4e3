// Operands of calls to a server on this machine, staged in a shared-memory region the
// server reads them from and writes C into (client/shared_memory.h), instead of crossing a
// socket: the library copies A and B in and C out, each large copy shared among a few
// threads. One region for the process, grown to the largest call so far and registered
// under a name of its own; one call uses it at a time, and a call that finds it busy, or a
// region that cannot be made or registered, goes over the socket. Thread-safe.
#ifndef GEMMD_CLIENT_BLAS_SHM_STAGING_H_
#define GEMMD_CLIENT_BLAS_SHM_STAGING_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/shared_memory.h"

namespace gemmd::blas {

// Copies `bytes` from `src` to `dst`, in pieces on up to `threads` threads when large.
void ParallelCopy(char* dst, const char* src, int64_t bytes, int threads);

class ShmStaging {
 public:
  // The region while one call holds it (its mutex): at least the bytes asked for.
  class Lease {
   public:
    char* data() const { return region_->data(); }
    const std::string& name() const { return name_; }

   private:
    friend class ShmStaging;
    Lease(std::unique_lock<std::mutex> lock, SharedMemoryRegion* region, const std::string& name)
        : lock_(std::move(lock)), region_(region), name_(name) {}
    std::unique_lock<std::mutex> lock_;
    SharedMemoryRegion* region_;
    std::string name_;
  };

  explicit ShmStaging(std::shared_ptr<grpc::Channel> channel) : channel_(std::move(channel)) {}

  // The region, grown to `bytes` when smaller; null when another call holds it. An error
  // when it cannot be made or registered (the server has regions off, is on another
  // machine, or refuses the name): the caller then goes over the socket.
  absl::StatusOr<std::unique_ptr<Lease>> TryAcquire(int64_t bytes);
  // Unregisters and removes the region (at the program's exit: a region left registered
  // holds the server's memory until it restarts). Waits for a call that holds it.
  void Release();

 private:
  // Makes a region of `bytes` and registers it (the old one unregistered first).
  absl::Status Grow(int64_t bytes);

  std::shared_ptr<grpc::Channel> channel_;
  std::mutex mu_;       // held by a Lease
  std::string prefix_;  // the server's, fetched once
  std::unique_ptr<SharedMemoryRegion> region_;
  std::string name_;
  int generation_ = 0;
};

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_SHM_STAGING_H_
