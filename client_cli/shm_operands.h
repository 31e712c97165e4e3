// --shm: a call's operands copied once into a shared-memory region the server maps (it
// must run on this machine and share /dev/shm), with room for C, so each call carries
// slices of the region instead of tensor bytes. The region is registered on creation
// and unregistered (and removed) when this goes.
#ifndef GEMMD_CLIENT_CLI_SHM_OPERANDS_H_
#define GEMMD_CLIENT_CLI_SHM_OPERANDS_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/gemm_client.h"
#include "client/shared_memory.h"

namespace gemmd {

class ShmOperands {
 public:
  // Copies each of `payloads` into a new region (after its own 4 KiB-aligned start) and
  // leaves `c_slots` slots of `c_bytes` for C after them. `key`: the object's name; empty
  // = "/" + the server's shm_prefix + "cli-PID" (a server with tenants needs the
  // tenant's name in it: --shm_key); a named key must not exist yet (ALREADY_EXISTS).
  // FAILED_PRECONDITION when the server has regions off; the server's errors otherwise.
  static absl::StatusOr<std::unique_ptr<ShmOperands>> Create(
      std::shared_ptr<grpc::Channel> channel, const std::string& key,
      const std::vector<absl::string_view>& payloads, int c_slots, int64_t c_bytes);
  ~ShmOperands();

  // Payload i's slice (an empty payload: an unset slice).
  RegionSliceRef Payload(size_t i) const { return payloads_[i]; }
  RegionSliceRef CSlot(int i) const;
  absl::string_view C(int i) const;  // C slot i's bytes, as the server wrote them

 private:
  ShmOperands() = default;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<SharedMemoryRegion> region_;
  std::string name_;
  std::vector<RegionSliceRef> payloads_;
  int64_t c_at_ = 0, c_bytes_ = 0;
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_SHM_OPERANDS_H_
