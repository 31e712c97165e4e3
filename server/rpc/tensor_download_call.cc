#include "server/rpc/tensor_download_call.h"

#include <grpcpp/support/slice.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/proto_types.h"
#include "proto/wire/gemm_wire.h"
#include "server/rpc/call_continuation.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/raw_messages.h"
#include "server/store/canonical_read.h"

namespace gemmd {

// Host memory the chunks of one copying download may take: reserved when it starts,
// given back (to --max_inflight_bytes and the tenant) when the call and every chunk
// gRPC still held are gone.
class TensorDownloadCall::Room {
 public:
  Room(std::shared_ptr<HostMemory> memory, Reservation reservation,
       std::shared_ptr<TenantBudget> budget, std::string tenant, int64_t charged)
      : memory_(std::move(memory)),
        reservation_(std::move(reservation)),
        budget_(std::move(budget)),
        tenant_(std::move(tenant)),
        charged_(charged) {}
  ~Room() { budget_->Release(tenant_, charged_); }

  // A buffer for the next chunk, paid for by the room while it holds enough.
  absl::StatusOr<std::unique_ptr<HostBuffer>> Acquire(size_t bytes) {
    return memory_->AcquireBuffer(bytes, &reservation_);
  }
  // A chunk gRPC is done with: its buffer's room goes back to the download.
  void Recycle(std::unique_ptr<HostBuffer> buffer) {
    memory_->Recycle(std::move(buffer), &reservation_);
  }

 private:
  const std::shared_ptr<HostMemory> memory_;
  Reservation reservation_;
  std::shared_ptr<TenantBudget> budget_;
  std::string tenant_;
  int64_t charged_;
};

namespace {

// A chunk's bytes that are the tensor's own memory: the slice keeps the tensor.
void ReleasePin(void* pin) { delete static_cast<TensorPin*>(pin); }

// A chunk copied out of device memory into a pooled host buffer (page-locked on a GPU,
// so the copy is one DMA): the buffer goes back to the pool when gRPC is done with it.
struct CopiedChunk {
  std::unique_ptr<HostBuffer> buffer;
  std::shared_ptr<TensorDownloadCall::Room> room;
};
void FreeCopiedChunk(void* chunk) {
  auto* c = static_cast<CopiedChunk*>(chunk);
  c->room->Recycle(std::move(c->buffer));
  delete c;
}

absl::Status NoStore() {
  return absl::FailedPreconditionError(
      "this server keeps no resident tensors (--tensor_store_bytes=0)");
}

}  // namespace

absl::StatusOr<DownloadRange> RangeOf(const TensorSpec& spec, int64_t row_begin,
                                      int64_t row_end) {
  const int64_t rows = Rows(spec);
  if (row_begin == 0 && row_end == 0) row_end = rows;
  if (row_begin < 0 || row_end <= row_begin || row_end > rows) {
    return absl::OutOfRangeError(absl::StrCat(
        "rows [", row_begin, ", ", row_end, ") are not a range of the tensor's ", rows,
        " rows; expected 0 <= row_begin < row_end <= ", rows, " (both 0: the whole tensor)"));
  }
  DownloadRange range;
  range.data_begin = row_begin * RowDataBytes(spec);
  range.data_bytes = (row_end - row_begin) * RowDataBytes(spec);
  range.scale_begin = row_begin * RowScaleBytes(spec);
  range.scale_bytes = (row_end - row_begin) * RowScaleBytes(spec);
  return range;
}

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

TensorDownloadCall::TensorDownloadCall(const TensorCallEnvironment* env, QueuedCall* call,
                                       std::string tenant)
    : QueuedReactor(call),
      env_(env),
      context_(&context()),
      tenant_(std::move(tenant)),
      started_(absl::Now()) {
  env_->metrics->AddInflight(1);
  StartRead(&request_);
}

void TensorDownloadCall::OnReadDone(bool ok) {
  if (!ok) {
    FinishWithStatus(NoRequest("gemm.v1.GetTensorRequest"));
    return;
  }
  const absl::Status started = Start(request_);
  request_.Clear();
  if (!started.ok()) {
    pin_.reset();
    room_.reset();
    FinishWithStatus(started);
    return;
  }
  gemm::v1::TensorHeader header = HeaderOf(pin_->spec, pin_->expires, pin_->label, absl::Now());
  header.set_device(DeviceId(pin_->device->description()));
  const wire::EncodedMessage chunk = wire::EncodeTensorChunk(&header, "", "");
  grpc::Slice slice(chunk.Flatten());
  chunk_ = grpc::ByteBuffer(&slice, 1);
  StartWrite(&chunk_);
  Prefetch();
}

absl::Status TensorDownloadCall::Start(const grpc::ByteBuffer& request) {
  const bool continues =
      env_->registry->draining() && ContinuesACall(*context_, env_->store, tenant_);
  if (absl::Status s = env_->registry->Enter(this, continues); !s.ok()) return s;
  registered_ = true;
  gemm::v1::GetTensorRequest parsed;
  if (absl::Status s = ParseSmallRequest(request, &parsed); !s.ok()) return s;
  if (env_->store == nullptr) return NoStore();
  absl::StatusOr<TensorPin> pin = env_->store->Acquire(parsed.handle(), tenant_);
  if (!pin.ok()) return pin.status();
  pin_ = *std::move(pin);
  if (absl::Status s = pin_->CheckDeviceHealthy(); !s.ok()) return s;
  absl::StatusOr<DownloadRange> range =
      RangeOf(pin_->spec, parsed.row_begin(), parsed.row_end());
  if (!range.ok()) return range.status();
  range_ = *range;
  // Host memory in the uploaded layout goes out as it is; anything else is read into
  // chunks (a re-laid out weight unpacked on the way).
  if (pin_->device->resident_in_host_memory() && !env_->copy_downloads &&
      pin_->layout == WeightLayout::kCanonical) {
    return absl::OkStatus();
  }
  const int64_t room = std::min(2 * kDownloadChunkBytes, range_.bytes());
  absl::StatusOr<Reservation> reservation = env_->memory->Reserve(room);
  if (!reservation.ok()) return reservation.status();
  if (absl::Status s = env_->tenant_budget->Charge(tenant_, room); !s.ok()) return s;
  room_ = std::make_shared<Room>(env_->memory, *std::move(reservation), env_->tenant_budget,
                                 tenant_, room);
  return absl::OkStatus();
}

absl::StatusOr<grpc::Slice> TensorDownloadCall::ChunkSlice(bool scales, int64_t offset, size_t n) {
  if (room_ == nullptr) {
    const char* resident = (scales ? pin_->scales() : pin_->data()) + offset;
    return grpc::Slice(const_cast<char*>(resident), n, &ReleasePin, new TensorPin(pin_));
  }
  // Paid for by the room the download reserved, which the chunks gRPC is done with give
  // back.
  absl::StatusOr<std::unique_ptr<HostBuffer>> buffer = room_->Acquire(n);
  if (!buffer.ok()) return buffer.status();
  char* data = (*buffer)->data();
  if (absl::Status s = ReadCanonical(*pin_, scales, offset, static_cast<int64_t>(n), data);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("reading the tensor: ", s.message()));
  }
  return grpc::Slice(data, n, &FreeCopiedChunk, new CopiedChunk{*std::move(buffer), room_});
}

void TensorDownloadCall::OnWriteDone(bool ok) {
  if (!ok) {  // the client went away
    FinishWithStatus(absl::CancelledError("the client cancelled the download"));
    return;
  }
  Next();
}

absl::StatusOr<std::optional<grpc::ByteBuffer>> TensorDownloadCall::MakeChunk() {
  const bool data = data_sent_ < range_.data_bytes;
  if (!data && scales_sent_ >= range_.scale_bytes) return std::nullopt;  // all sent
  const int64_t n = data ? std::min(kDownloadChunkBytes, range_.data_bytes - data_sent_)
                         : std::min(kDownloadChunkBytes, range_.scale_bytes - scales_sent_);
  const int64_t from = data ? range_.data_begin + data_sent_ : range_.scale_begin + scales_sent_;
  absl::StatusOr<grpc::Slice> payload = ChunkSlice(!data, from, static_cast<size_t>(n));
  if (!payload.ok()) return payload.status();
  (data ? data_sent_ : scales_sent_) += n;
  // The field's tag and length, then the payload slice itself.
  const absl::string_view view(reinterpret_cast<const char*>(payload->begin()), payload->size());
  const wire::EncodedMessage message =
      wire::EncodeTensorChunk(nullptr, data ? view : "", data ? "" : view);
  std::vector<grpc::Slice> slices;
  for (const wire::EncodedMessage::Piece& piece : message.pieces()) {
    slices.push_back(piece.is_payload ? *payload : grpc::Slice(piece.owned));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

void TensorDownloadCall::Prefetch() {
  absl::MutexLock lock(&mu_);
  if (!next_.has_value()) next_ = MakeChunk();
}

void TensorDownloadCall::Next() {
  absl::StatusOr<std::optional<grpc::ByteBuffer>> chunk;
  {
    // Waits for a prefetch under way; makes the chunk here when there is none.
    absl::MutexLock lock(&mu_);
    chunk = next_.has_value() ? *std::move(next_) : MakeChunk();
    next_.reset();
  }
  if (!chunk.ok()) {
    FinishWithStatus(chunk.status());
    return;
  }
  if (!chunk->has_value()) {
    FinishWithStatus(absl::OkStatus());
    return;
  }
  chunk_ = **std::move(chunk);
  StartWrite(&chunk_);
  // The next chunk is read out of the device while gRPC sends this one.
  Prefetch();
}

void TensorDownloadCall::FinishWithStatus(const absl::Status& status) {
  status_ = status;
  Finish(ToGrpcStatus(status));
}

void TensorDownloadCall::OnDone() {
  const absl::Time now = absl::Now();
  chunk_.Clear();
  {
    absl::MutexLock lock(&mu_);
    next_.reset();  // a chunk prefetched for a write that never came
  }
  pin_.reset();
  room_.reset();
  env_->reporter->Report(RpcMethod::kGetTensor, PrecisionLabel::None(),
                         ClientOutcome(*context_, status_, now), tenant_, context_->peer(),
                         now - started_);
  env_->metrics->AddInflight(-1);
  if (registered_) env_->registry->Leave(this);
  delete this;
}

}  // namespace gemmd
