// Locate, for payloads in shared memory: each RegionSlice a request names (Tensor.shm,
// QuantizedTensor.data_shm / scales_shm) resolved in the caller's tenant's regions and
// set as that payload's bytes, as if it had arrived inline, so validation and placement
// treat both alike; and C's destination when the request gives one (c_shm). The regions
// are held until the request goes, and checked again once its job is done: a region
// truncated or unregistered meanwhile fails the call (CheckRegionsIntact). Thread-safe.
#ifndef GEMMD_SERVER_RPC_REGION_PAYLOADS_H_
#define GEMMD_SERVER_RPC_REGION_PAYLOADS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/wire/gemm_wire.h"
#include "server/regions/region_table.h"

namespace gemmd {

struct RegionPayloads {
  std::vector<std::shared_ptr<SharedRegion>> regions;  // each once
  // The located payloads that lie in a region: the device reads them there.
  std::vector<const wire::ByteRuns*> in_region;
  char* c_out = nullptr;  // c_shm's bytes, when set
  int64_t c_out_bytes = 0;
  int64_t input_bytes = 0;  // the payloads' bytes in regions (not received on the wire)

  bool InRegion(const wire::ByteRuns* runs) const;
};

// INVALID_ARGUMENT for a payload sent both inline and in a region, or a c_shm that
// overlaps an operand's slice (other than C's own: C = alpha*A*B + beta*C in place);
// NOT_FOUND for a region the tenant has not registered; OUT_OF_RANGE for a slice
// beyond its region; FAILED_PRECONDITION with `table` null (--shm=off) or a truncated
// region.
absl::StatusOr<RegionPayloads> LocateMatmulRegions(const RegionTable* table,
                                                   const std::string& tenant,
                                                   wire::MatmulRequestWire* located);
absl::StatusOr<RegionPayloads> LocateQuantizedRegions(const RegionTable* table,
                                                      const std::string& tenant,
                                                      wire::QuantizedMatmulRequestWire* located);

// C's slice against C's size: INVALID_ARGUMENT unless it is exactly `c_bytes`.
absl::Status CheckResultSlice(const RegionPayloads& regions, int64_t c_bytes);

// OK when every region the request used is still whole and registered (the first
// failure otherwise; SharedRegion::CheckIntact).
absl::Status CheckRegionsIntact(const std::vector<std::shared_ptr<SharedRegion>>& regions);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_REGION_PAYLOADS_H_
