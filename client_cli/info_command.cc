#include <grpcpp/client_context.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "client_cli/commands.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "proto/proto_types.h"

namespace gemmd {

int RunInfo(const CliOptions& o) {
  auto stub = gemm::v1::GemmService::NewStub(ConnectChannel(o.server()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(o.timeout_s)));
  gemm::v1::ServerInfo info;
  grpc::Status status = stub->GetServerInfo(&context, gemm::v1::GetServerInfoRequest(), &info);
  if (!status.ok()) return ReportRpcError("GetServerInfo", status);

  if (o.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(info, &json, options);
    std::printf("%s", json.c_str());
    return 0;
  }
  std::printf("server:   gemmd %s at %s\n", info.version().c_str(), o.target.c_str());
  std::printf("backend:  %s\n", info.backend().c_str());
  for (const gemm::v1::DeviceInfo& d : info.devices()) {
    std::printf("device %d: %s [%s]%s%s%s\n", d.index(), d.name().c_str(),
                d.healthy() ? "healthy" : "UNHEALTHY", d.compute_capability().empty() ? "" : " sm_",
                d.compute_capability().c_str(),
                d.memory_bytes() > 0
                    ? absl::StrFormat(" %.1f GiB", d.memory_bytes() / 1073741824.0).c_str()
                    : "");
  }
  for (const gemm::v1::KernelInfo& k : info.kernels()) {
    std::printf("kernel:   %-32s %s\n", k.name().c_str(),
                ProtoPrecisionName(k.precision()).c_str());
  }
  for (const std::string& name : info.quantized_kernels()) {
    std::printf("kernel:   %-32s QUANTIZED (QuantizedMatmul)\n", name.c_str());
  }
  const gemm::v1::Limits& l = info.limits();
  std::printf(
      "limits:   max_message_bytes=%lld max_elements=%lld max_queue_size=%u\n"
      "batching: max_batch_size=%u max_queue_delay_us=%lld max_inflight_bytes=%lld\n",
      static_cast<long long>(l.max_message_bytes()), static_cast<long long>(l.max_elements()),
      l.max_queue_size(), l.max_batch_size(), static_cast<long long>(l.max_queue_delay_us()),
      static_cast<long long>(l.max_inflight_bytes()));
  std::printf(
      "tensors:  tensor_store_bytes=%lld tensor_store_max_tensors=%lld "
      "max_tensor_chunk_bytes=%lld upload_idle_timeout_ms=%lld instance=%s\n",
      static_cast<long long>(l.tensor_store_bytes()),
      static_cast<long long>(l.tensor_store_max_tensors()),
      static_cast<long long>(l.max_tensor_chunk_bytes()),
      static_cast<long long>(l.upload_idle_timeout_ms()), info.instance().c_str());
  return 0;
}

}  // namespace gemmd
