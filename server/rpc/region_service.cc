// GemmServiceImpl's shared-memory region RPCs (the rest: gemm_service.cc).
#include "absl/time/clock.h"
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

template <typename Serve>
grpc::ServerUnaryReactor* GemmServiceImpl::ServeRegionCall(grpc::CallbackServerContext* context,
                                                           RpcMethod method, Serve serve) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, method);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
  absl::Status status = registry_.CheckOpen();
  if (status.ok() && (regions_ == nullptr || !regions_->enabled())) status = RegionsOff();
  if (status.ok()) status = serve(*tenant);
  FinishUnary(reactor, *context, method, *tenant, status, accepted);
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::RegisterRegion(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return ServeRegionCall(context, RpcMethod::kRegisterRegion, [&](const std::string& tenant) {
    gemm::v1::RegisterRegionRequest parsed;
    if (absl::Status s = ParseSmallRequest(*request, &parsed); !s.ok()) return s;
    absl::StatusOr<std::shared_ptr<SharedRegion>> region = regions_->Register(
        tenant, parsed.name(), parsed.key(), parsed.offset(), parsed.bytes());
    if (!region.ok()) return region.status();
    gemm::v1::RegionInfo info;
    Describe(**region, &info);
    *response = SerializeToByteBuffer(info);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GemmServiceImpl::UnregisterRegion(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return ServeRegionCall(context, RpcMethod::kUnregisterRegion, [&](const std::string& tenant) {
    gemm::v1::UnregisterRegionRequest parsed;
    if (absl::Status s = ParseSmallRequest(*request, &parsed); !s.ok()) return s;
    if (absl::Status s = regions_->Unregister(tenant, parsed.name()); !s.ok()) return s;
    *response = SerializeToByteBuffer(gemm::v1::UnregisterRegionResponse());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GemmServiceImpl::ListRegions(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return ServeRegionCall(context, RpcMethod::kListRegions, [&](const std::string& tenant) {
    gemm::v1::ListRegionsRequest parsed;
    if (absl::Status s = ParseSmallRequest(*request, &parsed); !s.ok()) return s;
    gemm::v1::ListRegionsResponse reply;
    for (const std::shared_ptr<SharedRegion>& region : regions_->List(tenant)) {
      Describe(*region, reply.add_regions());
    }
    reply.set_region_bytes(regions_->bytes());
    reply.set_region_cap_bytes(regions_->settings().max_bytes);
    *response = SerializeToByteBuffer(reply);
    return absl::OkStatus();
  });
}

}  // namespace gemmd
