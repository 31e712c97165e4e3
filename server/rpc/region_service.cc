// GemmServiceImpl's shared-memory region RPCs (the rest: gemm_service.cc).
#include "server/rpc/gemm_service.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/raw_messages.h"

namespace gemmd {
namespace {

void Describe(const SharedRegion& region, gemm::v1::RegionInfo* info) {
  info->set_name(region.name());
  info->set_key(region.key());
  info->set_offset(region.offset());
  info->set_bytes(region.bytes());
  info->set_page_locked(region.page_locked());
  info->set_registered_unix_ms(absl::ToUnixMillis(region.registered()));
}

}  // namespace

absl::Status GemmServiceImpl::RegionsOpen() {
  if (absl::Status s = registry_.CheckOpen(); !s.ok()) return s;
  if (regions_ == nullptr || !regions_->enabled()) return RegionsOff();
  return absl::OkStatus();
}

absl::Status GemmServiceImpl::RegisterRegion(const grpc::ServerContextBase& context,
                                             const std::string& tenant,
                                             const grpc::ByteBuffer& request,
                                             grpc::ByteBuffer* response) {
  if (absl::Status s = RegionsOpen(); !s.ok()) return s;
  gemm::v1::RegisterRegionRequest parsed;
  if (absl::Status s = ParseSmallRequest(request, &parsed); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<SharedRegion>> region =
      regions_->Register(tenant, parsed.name(), parsed.key(), parsed.offset(), parsed.bytes());
  if (!region.ok()) return region.status();
  gemm::v1::RegionInfo info;
  Describe(**region, &info);
  *response = SerializeToByteBuffer(info);
  return absl::OkStatus();
}

absl::Status GemmServiceImpl::UnregisterRegion(const grpc::ServerContextBase& context,
                                               const std::string& tenant,
                                               const grpc::ByteBuffer& request,
                                               grpc::ByteBuffer* response) {
  if (absl::Status s = RegionsOpen(); !s.ok()) return s;
  gemm::v1::UnregisterRegionRequest parsed;
  if (absl::Status s = ParseSmallRequest(request, &parsed); !s.ok()) return s;
  if (absl::Status s = regions_->Unregister(tenant, parsed.name()); !s.ok()) return s;
  *response = SerializeToByteBuffer(gemm::v1::UnregisterRegionResponse());
  return absl::OkStatus();
}

absl::Status GemmServiceImpl::ListRegions(const grpc::ServerContextBase& context,
                                          const std::string& tenant,
                                          const grpc::ByteBuffer& request,
                                          grpc::ByteBuffer* response) {
  if (absl::Status s = RegionsOpen(); !s.ok()) return s;
  gemm::v1::ListRegionsRequest parsed;
  if (absl::Status s = ParseSmallRequest(request, &parsed); !s.ok()) return s;
  gemm::v1::ListRegionsResponse reply;
  for (const std::shared_ptr<SharedRegion>& region : regions_->List(tenant)) {
    Describe(*region, reply.add_regions());
  }
  reply.set_region_bytes(regions_->bytes());
  reply.set_region_cap_bytes(regions_->settings().max_bytes);
  *response = SerializeToByteBuffer(reply);
  return absl::OkStatus();
}

}  // namespace gemmd
