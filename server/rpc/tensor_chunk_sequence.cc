#include "server/rpc/tensor_chunk_sequence.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/proto_types.h"

namespace gemmd {

absl::StatusOr<TensorSpec> SpecFromHeader(const gemm::v1::TensorHeader& header) {
  TensorSpec spec;
  spec.shape.assign(header.shape().begin(), header.shape().end());
  const bool dense = header.dtype() != gemm::v1::DATA_TYPE_UNSPECIFIED;
  const bool quantized = header.format() != gemm::v1::QUANT_FORMAT_UNSPECIFIED;
  if (dense == quantized) {
    return absl::InvalidArgumentError(
        dense ? "header sets both dtype and format; a tensor is dense (dtype) or quantized "
                "(format)"
              : "header sets neither dtype nor format; set dtype (FLOAT32, FLOAT16, BFLOAT16, "
                "FLOAT64) for a dense tensor or format (INT8, NVFP4) for a quantized one");
  }
  if (dense) {
    const std::optional<DataType> type = DataTypeFromProto(header.dtype());
    if (!type || *type == DataType::kInt8 || *type == DataType::kInt32) {
      return absl::InvalidArgumentError(
          absl::StrCat("header.dtype ", ProtoDataTypeName(header.dtype()),
                       " is not kept; expected FLOAT32, FLOAT16, BFLOAT16 or FLOAT64 (quantized "
                       "weights use format)"));
    }
    spec.dtype = *type;
    return spec;
  }
  spec.quantized = true;
  switch (header.format()) {
    case gemm::v1::QUANT_FORMAT_INT8:
      spec.format = QuantFormat::kInt8;
      break;
    case gemm::v1::QUANT_FORMAT_NVFP4:
      spec.format = QuantFormat::kNvfp4;
      spec.tensor_scale = header.tensor_scale();
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "header.format ", header.format(), " is not a QuantFormat; expected INT8 or NVFP4"));
  }
  return spec;
}

TensorChunkSequence::TensorChunkSequence(TensorStore* store, std::string tenant,
                                         const RegionTable* regions)
    : store_(store), tenant_(std::move(tenant)), regions_(regions) {}

absl::StatusOr<wire::ByteRuns> TensorChunkSequence::RegionBytes(
    const char* field, bool set, const gemm::v1::RegionSlice& slice,
    const wire::ByteRuns& inline_bytes, std::shared_ptr<SharedRegion>* held) const {
  if (!set) return inline_bytes;
  if (!inline_bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunks_, ": ", field, " is sent inline and in a region; send it one way"));
  }
  if (regions_ == nullptr || !regions_->enabled()) return RegionsOff();
  absl::StatusOr<std::shared_ptr<SharedRegion>> region = regions_->Find(tenant_, slice.region());
  if (!region.ok()) {
    return absl::Status(region.status().code(),
                        absl::StrCat(field, "_shm: ", region.status().message()));
  }
  absl::StatusOr<char*> at =
      (*region)->Slice(absl::StrCat(field, "_shm"), slice.offset(), slice.bytes());
  if (!at.ok()) return at.status();
  *held = *std::move(region);
  return wire::ByteRuns(absl::string_view(*at, static_cast<size_t>(slice.bytes())));
}

absl::Status TensorChunkSequence::Consume(const wire::ByteRuns& chunk_bytes) {
  ++chunks_;
  wire::TensorChunkWire chunk;
  if (absl::Status s = wire::ParseTensorChunk(chunk_bytes, &chunk); !s.ok()) return s;
  const int64_t bytes = static_cast<int64_t>(chunk.data.size() + chunk.scales.size());
  if (bytes > kMaxTensorChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, " carries ", bytes,
                                                   " bytes of data and scales; at most ",
                                                   kMaxTensorChunkBytes, " per chunk"));
  }
  if (chunks_ == 1) {
    if (!chunk.has_header) {
      return absl::InvalidArgumentError(
          "the first chunk has no header; it must say what the tensor is (shape and dtype, or "
          "shape, format and tensor_scale)");
    }
    if (absl::Status s = BeginFrom(chunk.header); !s.ok()) return s;
  } else if (chunk.has_header) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunks_, " has a header; only the first chunk carries one"));
  }
  std::shared_ptr<SharedRegion> data_region, scales_region;
  absl::StatusOr<wire::ByteRuns> data =
      RegionBytes("data", chunk.has_data_shm, chunk.data_shm, chunk.data, &data_region);
  if (!data.ok()) return data.status();
  absl::StatusOr<wire::ByteRuns> scales = RegionBytes(
      "scales", chunk.has_scales_shm, chunk.scales_shm, chunk.scales, &scales_region);
  if (!scales.ok()) return scales.status();
  if (upload_ == nullptr) {  // a tensor opened for parts
    if (!data->empty() || !scales->empty()) {
      return absl::InvalidArgumentError(
          "a header with parts opens the tensor; its bytes go in each part's own stream "
          "(header.part_of and header.part)");
    }
    return absl::OkStatus();
  }
  if (absl::Status s = upload_->AppendRuns(data->runs(), scales->runs()); !s.ok()) return s;
  // A region truncated while its bytes were copied: what was copied is not the tensor.
  for (const std::shared_ptr<SharedRegion>& region : {data_region, scales_region}) {
    if (region == nullptr) continue;
    if (absl::Status s = region->CheckIntact(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TensorChunkSequence::BeginFrom(const gemm::v1::TensorHeader& header) {
  if (header.has_part_of()) {
    if (header.shape_size() > 0 || header.parts() > 0 || !header.device().empty() ||
        header.temporary() ||
        header.dtype() != gemm::v1::DATA_TYPE_UNSPECIFIED ||
        header.format() != gemm::v1::QUANT_FORMAT_UNSPECIFIED || header.tensor_scale() != 0 ||
        header.ttl_s() != 0 || !header.label().empty()) {
      return absl::InvalidArgumentError(
          "a part's header carries part_of and part only; the tensor's shape, dtype or "
          "format, tensor_scale, ttl_s, label, device and temporary were given when it was "
          "opened");
    }
    if (header.part() >= kMaxParts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.part is ", header.part(), "; a tensor has at most ", kMaxParts, " parts"));
    }
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> part =
        store_->BeginPart(header.part_of().handle(), static_cast<int>(header.part()), tenant_);
    if (!part.ok()) return part.status();
    upload_ = *std::move(part);
    return absl::OkStatus();
  }
  absl::StatusOr<TensorSpec> spec = SpecFromHeader(header);
  if (!spec.ok()) return spec.status();
  const absl::Duration ttl = absl::Seconds(header.ttl_s());
  if (header.parts() > kMaxParts) {
    return absl::InvalidArgumentError(absl::StrCat("header.parts is ", header.parts(),
                                                   "; expected 2 to min(", kMaxParts, ", rows)"));
  }
  if (header.parts() >= 2) {
    absl::StatusOr<std::string> handle =
        store_->OpenParts(*spec, ttl, header.label(), static_cast<int>(header.parts()), tenant_,
                          header.device(), header.temporary());
    if (!handle.ok()) return handle.status();
    opened_ = *std::move(handle);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
      store_->Begin(*spec, ttl, header.label(), tenant_, header.device(), header.temporary());
  if (!upload.ok()) return upload.status();
  upload_ = *std::move(upload);
  return absl::OkStatus();
}

absl::StatusOr<std::string> TensorChunkSequence::Complete() {
  if (chunks_ == 0) {
    return absl::InvalidArgumentError("the stream ended before its first chunk (the header)");
  }
  if (upload_ == nullptr) return opened_;
  absl::StatusOr<std::string> handle = upload_->Finish();
  completed_ = handle.ok();
  return handle;
}

std::string TensorChunkSequence::handle() const {
  return upload_ != nullptr ? upload_->handle() : opened_;
}

}  // namespace gemmd
