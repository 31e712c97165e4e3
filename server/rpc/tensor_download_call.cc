#include "server/rpc/tensor_download_call.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/proto_types.h"
#include "server/rpc/grpc_status.h"

namespace gemmd {
namespace {

// Well under the 4 MiB a default gRPC client accepts per message (grpcio, C++), with the
// chunk's framing.
constexpr int64_t kDownloadChunkBytes = int64_t{2} << 20;

}  // namespace

gemm::v1::TensorHeader HeaderOf(const TensorSpec& spec, absl::Time expires,
                                const std::string& label, absl::Time now) {
  gemm::v1::TensorHeader header;
  for (int64_t d : spec.shape) header.add_shape(d);
  if (spec.quantized) {
    header.set_format(spec.format == QuantFormat::kInt8 ? gemm::v1::QUANT_FORMAT_INT8
                                                        : gemm::v1::QUANT_FORMAT_NVFP4);
    header.set_tensor_scale(spec.tensor_scale);
  } else {
    header.set_dtype(DataTypeToProto(spec.dtype));
  }
  if (expires != absl::InfiniteFuture()) {
    header.set_ttl_s(static_cast<uint32_t>(
        std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(expires - now, absl::Seconds(1))))));
  }
  header.set_label(label);
  return header;
}

TensorDownloadCall::TensorDownloadCall(TensorPin pin, const absl::Status& status,
                                       ServerMetrics* metrics, std::string tenant)
    : pin_(std::move(pin)), metrics_(metrics), tenant_(std::move(tenant)), started_(absl::Now()) {
  const absl::Status usable = status.ok() ? pin_->CheckDeviceHealthy() : status;
  if (!usable.ok()) {
    code_ = usable.code();
    Finish(ToGrpcStatus(usable));
    return;
  }
  *chunk_.mutable_header() = HeaderOf(pin_->spec, pin_->expires, pin_->label, absl::Now());
  chunk_.mutable_header()->set_device(DeviceId(pin_->device->description()));
  StartWrite(&chunk_);
}

void TensorDownloadCall::OnWriteDone(bool ok) {
  if (!ok) {  // the client went away
    code_ = absl::StatusCode::kCancelled;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the download"));
    return;
  }
  Next();
}

void TensorDownloadCall::Next() {
  chunk_.Clear();
  const int64_t data_bytes = DataBytes(pin_->spec);
  const int64_t scale_bytes = ScaleBytes(pin_->spec);
  absl::Status status;
  if (data_sent_ < data_bytes) {
    const int64_t n = std::min(kDownloadChunkBytes, data_bytes - data_sent_);
    std::string* data = chunk_.mutable_data();
    data->resize(static_cast<size_t>(n));
    status = pin_->device->ReadResident(data->data(), pin_->data() + data_sent_,
                                        static_cast<size_t>(n));
    data_sent_ += n;
  } else if (scales_sent_ < scale_bytes) {
    const int64_t n = std::min(kDownloadChunkBytes, scale_bytes - scales_sent_);
    std::string* scales = chunk_.mutable_scales();
    scales->resize(static_cast<size_t>(n));
    status = pin_->device->ReadResident(scales->data(), pin_->scales() + scales_sent_,
                                        static_cast<size_t>(n));
    scales_sent_ += n;
  } else {
    Finish(grpc::Status::OK);
    return;
  }
  if (!status.ok()) {
    code_ = status.code();
    Finish(ToGrpcStatus(absl::Status(status.code(),
                                     absl::StrCat("reading the tensor: ", status.message()))));
    return;
  }
  StartWrite(&chunk_);
}

void TensorDownloadCall::OnDone() {
  pin_.reset();
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(RpcMethod::kGetTensor, PrecisionLabel::None(), code_, tenant_);
    metrics_->ObservePhase(RpcMethod::kGetTensor, Phase::kTotal, absl::Now() - started_);
  }
  delete this;
}

}  // namespace gemmd
