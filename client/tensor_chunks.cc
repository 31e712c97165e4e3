#include "client/tensor_chunks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/proto_types.h"

namespace gemmd {
namespace {

constexpr uint32_t kHeaderField = gemm::v1::TensorChunk::kHeaderFieldNumber;
constexpr uint32_t kDataField = gemm::v1::TensorChunk::kDataFieldNumber;
constexpr uint32_t kScalesField = gemm::v1::TensorChunk::kScalesFieldNumber;

absl::Status BadShape(const gemm::v1::TensorHeader& h, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("tensor shape [", absl::StrJoin(h.shape(), ","), "]: ", why));
}

}  // namespace

absl::StatusOr<TensorRows> RowsOf(const gemm::v1::TensorHeader& h) {
  for (int64_t d : h.shape()) {
    if (d < 0) return BadShape(h, "negative dimension");
  }
  TensorRows r;
  if (h.format() != gemm::v1::QUANT_FORMAT_UNSPECIFIED) {
    if (h.shape_size() != 2) return BadShape(h, "a quantized tensor is [rows, K]");
    const int64_t k = h.shape(1);
    r.rows = h.shape(0);
    if (h.format() == gemm::v1::QUANT_FORMAT_INT8) {
      r.data_row_bytes = k;
      r.scales_row_bytes = 4;
    } else if (h.format() == gemm::v1::QUANT_FORMAT_NVFP4) {
      if (k % 16 != 0) return BadShape(h, "NVFP4 needs K % 16 == 0");
      r.data_row_bytes = k / 2;
      r.scales_row_bytes = k / 16;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown quantized format ", h.format()));
    }
  } else {
    const std::optional<DataType> type = DataTypeFromProto(h.dtype());
    if (!type) {
      return absl::InvalidArgumentError(
          absl::StrCat("a dense tensor needs a dtype, not ", ProtoDataTypeName(h.dtype())));
    }
    if (h.shape_size() != 2 && h.shape_size() != 3) {
      return BadShape(h, "a dense tensor is [rows, cols] or [batch, rows, cols]");
    }
    const int n = h.shape_size();
    r.rows = h.shape(n - 2);
    if (n == 3 && __builtin_mul_overflow(h.shape(0), r.rows, &r.rows)) {
      return BadShape(h, "sizes overflow");
    }
    if (__builtin_mul_overflow(h.shape(n - 1), static_cast<int64_t>(DataTypeSize(*type)),
                               &r.data_row_bytes)) {
      return BadShape(h, "sizes overflow");
    }
  }
  int64_t unused = 0;
  if (__builtin_mul_overflow(r.rows, r.data_row_bytes + r.scales_row_bytes, &unused)) {
    return BadShape(h, "sizes overflow");
  }
  return r;
}

RowRange PartRows(int64_t rows, int part, int parts) {
  // rows * part fits: rows is a tensor's row count and parts is small.
  return {rows * part / parts, rows * (part + 1) / parts};
}

absl::Status ParseTensorChunk(const wire::ByteRuns& bytes, TensorChunkWire* out) {
  wire::WireCursor in(bytes);
  bool seen_data = false, seen_scales = false;
  while (!in.AtEnd()) {
    wire::Tag tag;
    if (absl::Status s = in.ReadTag(&tag); !s.ok()) return s;
    const bool known = tag.field == kHeaderField || tag.field == kDataField ||
                       tag.field == kScalesField;
    if (!known) {
      if (absl::Status s = in.SkipValue(tag.type, tag.field, "TensorChunk"); !s.ok()) return s;
      continue;
    }
    if (tag.type != wire::WireType::kLengthDelimited) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorChunk field ", tag.field, " has the wrong wire type"));
    }
    size_t length = 0;
    if (tag.field == kHeaderField) {
      if (absl::Status s = in.ReadLength(&length, "header"); !s.ok()) return s;
      std::string header;
      if (absl::Status s = in.TakeString(length, &header, "header"); !s.ok()) return s;
      if (out->header.has_value()) {
        return absl::InvalidArgumentError("TensorChunk has two headers");
      }
      out->header.emplace();
      if (!out->header->ParseFromString(header)) {
        return absl::InvalidArgumentError("TensorChunk.header is not a gemm.v1.TensorHeader");
      }
      continue;
    }
    const bool data = tag.field == kDataField;
    bool& seen = data ? seen_data : seen_scales;
    if (seen) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorChunk has two ", data ? "data" : "scales", " fields"));
    }
    seen = true;
    const char* what = data ? "data" : "scales";
    if (absl::Status s = in.ReadLength(&length, what); !s.ok()) return s;
    if (absl::Status s = in.TakeRuns(length, data ? &out->data : &out->scales, what); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gemmd
