// Where a request's tensor payloads go between the wire and the device: each one is
// either used in place (a view into gRPC's received slices), left in those slices as
// pieces for a device that gathers them itself (the CUDA device's staging ring), or
// copied once into one buffer from the server's HostMemory; that is the only copy of
// tensor data a request makes on the host before its device reads it.
//
// In place needs the payload in one slice, aligned to 16 bytes, and no page-locked buffer
// for its size (the CUDA backend's payloads above 16 KiB are copied into a pooled
// page-locked buffer or block, from which the GPU's DMA reads directly, unless the
// request's copied payloads together come to a size that is never page-locked; smaller
// ones are staged by the device wherever they are). Thread-safe.
#ifndef GEMMD_SERVER_RPC_PAYLOAD_PLACEMENT_H_
#define GEMMD_SERVER_RPC_PAYLOAD_PLACEMENT_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/wire/gemm_wire.h"
#include "server/devices/host_copier.h"
#include "server/rpc/host_memory.h"

namespace gemmd {

struct PlacedPayloads {
  std::unique_ptr<HostBuffer> buffer;  // null when nothing was copied
  bool uses_wire = false;              // some payload is used in place
};

struct PayloadSlot {
  const wire::ByteRuns* runs = nullptr;  // where it arrived
  absl::string_view* view = nullptr;     // where it is placed
  // Where it may be left in pieces (null: it must be contiguous). Then *view has its
  // size and no data.
  std::vector<absl::string_view>* pieces = nullptr;
  // In a shared-memory region: read where it is whatever its size (when aligned), as
  // the region is page-locked or the device stages it anyway.
  bool in_region = false;
};

// Places each slot's payload and points its view at it; the copying is spread over
// `copier`'s threads when it is large (copier may be null: this thread alone). A payload
// that arrived in several pieces is left so when its slot allows it, `pieces_ok` and its
// size may not be page-locked. RESOURCE_EXHAUSTED when the buffer would pass the memory
// cap.
absl::StatusOr<PlacedPayloads> PlacePayloads(HostMemory* memory, HostCopier* copier,
                                             const std::vector<PayloadSlot>& payloads,
                                             bool pieces_ok = false);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_PAYLOAD_PLACEMENT_H_
