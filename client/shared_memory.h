// Shared memory for a caller on the server's machine: a POSIX shared-memory object the
// caller creates and maps (SharedMemoryRegion), and the RPCs that register it with the
// server (RegionClient). Once registered, requests name slices of it (RegionSliceRef in
// gemm_client.h) instead of carrying tensors: the server reads operands where they are
// and writes C there, and no tensor byte crosses the socket.
//
//   auto shm = gemmd::SharedMemoryRegion::Create("/gemmd-mine", bytes);  // the prefix:
//   gemmd::RegionClient regions(channel);          // ServerInfo.limits.shm_prefix
//   regions.Register("mine", (*shm)->key());
//   std::memcpy((*shm)->data(), a, a_bytes);  ...
//   args.a.shm = {"mine", 0, a_bytes};  args.c_shm = {"mine", c_at, c_bytes};
//
// In containers the server and its callers must share /dev/shm (docker/compose.yaml,
// docker/k8s). Thread-safe.
#ifndef GEMMD_CLIENT_SHARED_MEMORY_H_
#define GEMMD_CLIENT_SHARED_MEMORY_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"

namespace gemmd {

class SharedMemoryRegion {
 public:
  // Creates the object `key` ("/name") of `bytes` (zeros) and maps it; ALREADY_EXISTS
  // when it exists (unless `replace`: it is unlinked first). `mode`: who else may open
  // it (the server must: the same user, or a mode that lets its user read and write).
  // Unlinked and unmapped when this goes.
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> Create(const std::string& key,
                                                                    int64_t bytes,
                                                                    bool replace = false,
                                                                    int mode = 0600);
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const std::string& key() const { return key_; }
  char* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  SharedMemoryRegion() = default;
  std::string key_;
  char* data_ = nullptr;
  int64_t size_ = 0;
};

// The region RPCs; errors are the server's status (gemm.proto's RegisterRegionRequest).
class RegionClient {
 public:
  explicit RegionClient(std::shared_ptr<grpc::ChannelInterface> channel,
                        absl::Duration timeout = absl::Seconds(30))
      : channel_(std::move(channel)), timeout_(timeout) {}

  // Registers [offset, offset + bytes) of object `key` (bytes 0: to its end) as `name`.
  absl::StatusOr<gemm::v1::RegionInfo> Register(const std::string& name, const std::string& key,
                                                int64_t offset = 0, int64_t bytes = 0);
  absl::Status Unregister(const std::string& name);
  // What every region's key must start with after its "/" (ServerInfo.limits.shm_prefix);
  // FAILED_PRECONDITION when the server has regions off.
  absl::StatusOr<std::string> Prefix();
  absl::StatusOr<gemm::v1::ListRegionsResponse> List();

 private:
  std::shared_ptr<grpc::ChannelInterface> channel_;
  absl::Duration timeout_;
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_SHARED_MEMORY_H_
