#include "proto/wire/gemm_wire.h"

#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/wire/wire_fields.h"

namespace gemmd::wire {
namespace {

// gemm.v1.Tensor (shape = 1, dtype = 2, data = 3, shm = 4) and gemm.v1.QuantizedTensor
// (shape = 1, format = 2, data = 3, scales = 4, tensor_scale = 5, data_shm = 6,
// scales_shm = 7): one parser for both, the quantized fields only for a QuantizedTensor.
template <typename Head>
absl::Status ParseTensor(WireCursor in, const std::string& name, Head* head, ByteRuns* data,
                         ByteRuns* scales) {
  constexpr bool kQuantized = std::is_same_v<Head, gemm::v1::QuantizedTensor>;
  Fields f(name + ".");
  return ForEachField(in, name, [&](const Tag& tag, WireCursor* c) -> FieldResult {
    switch (tag.field) {
      case 1:
        return f.Shape(c, tag, head->mutable_shape());
      case 2: {
        int32_t value = 0;
        const absl::Status s = f.Int32(c, tag, kQuantized ? "format" : "dtype", &value);
        if constexpr (kQuantized) {
          head->set_format(static_cast<gemm::v1::QuantFormat>(value));
        } else {
          head->set_dtype(static_cast<gemm::v1::DataType>(value));
        }
        return s;
      }
      case 3:
        return f.Payload(c, tag, "data", data);
    }
    if constexpr (!kQuantized) {
      if (tag.field == 4) return SmallMessage(f, c, tag, "shm", head->mutable_shm());
    }
    if constexpr (kQuantized) {
      if (tag.field == 6) return SmallMessage(f, c, tag, "data_shm", head->mutable_data_shm());
      if (tag.field == 7) {
        return SmallMessage(f, c, tag, "scales_shm", head->mutable_scales_shm());
      }
      if (tag.field == 4) return f.Payload(c, tag, "scales", scales);
      if (tag.field == 5) {
        float scale = 0;
        const absl::Status s = f.Float(c, tag, "tensor_scale", &scale);
        head->set_tensor_scale(scale);
        return s;
      }
    }
    return std::nullopt;
  });
}

// A nested Tensor or QuantizedTensor field of `f`'s message (scales: the quantized one's).
template <typename Head>
absl::Status TensorField(Fields& f, WireCursor* c, const Tag& tag, const std::string& name,
                         Head* head, ByteRuns* data, ByteRuns* scales = nullptr) {
  WireCursor nested;
  absl::Status s = f.Message(c, tag, name, &nested);
  return s.ok() ? ParseTensor(nested, name, head, data, scales) : s;
}

}  // namespace

absl::Status ParseMatmulRequest(const ByteRuns& bytes, MatmulRequestWire* out) {
  Fields f("");
  gemm::v1::MatmulRequest& head = out->head;
  const absl::Status s = ForEachField(
      WireCursor(bytes), "gemm.v1.MatmulRequest",
      [&](const Tag& tag, WireCursor* c) -> FieldResult {
        absl::Status s;
        switch (tag.field) {
          case 1:
            return TensorField(f, c, tag, "a", head.mutable_a(), &out->a_data);
          case 2:
            return TensorField(f, c, tag, "b", head.mutable_b(), &out->b_data);
          case 3:
            return TensorField(f, c, tag, "c", head.mutable_c(), &out->c_data);
          case 4:
          case 5: {
            float value = 0;
            s = f.Float(c, tag, tag.field == 4 ? "alpha" : "beta", &value);
            tag.field == 4 ? head.set_alpha(value) : head.set_beta(value);
            return s;
          }
          case 6:
          case 7: {
            bool value = false;
            s = f.Bool(c, tag, tag.field == 6 ? "transpose_a" : "transpose_b", &value);
            tag.field == 6 ? head.set_transpose_a(value) : head.set_transpose_b(value);
            return s;
          }
          case 8: {
            int32_t precision = 0;
            s = f.Int32(c, tag, "precision", &precision);
            head.set_precision(static_cast<gemm::v1::Precision>(precision));
            return s;
          }
          case 9: {
            int32_t dtype = 0;
            s = f.Int32(c, tag, "output_dtype", &dtype);
            head.set_output_dtype(static_cast<gemm::v1::DataType>(dtype));
            return s;
          }
          case 10:
            return f.String(c, tag, "kernel", head.mutable_kernel());
          case 11:
            return SmallMessage(f, c, tag, "a_ref", head.mutable_a_ref());
          case 12:
            return SmallMessage(f, c, tag, "b_ref", head.mutable_b_ref());
          case 13:
            return SmallMessage(f, c, tag, "c_ref", head.mutable_c_ref());
          case 14:
            return SmallMessage(f, c, tag, "keep_c", head.mutable_keep_c());
          case 15:
            return SmallMessage(f, c, tag, "c_shm", head.mutable_c_shm());
          case 16:
            return SmallMessage(f, c, tag, "row_plan", head.mutable_row_plan());
          case 17:
          case 18: {
            double value = 0;
            s = f.Double(c, tag, tag.field == 17 ? "alpha_f64" : "beta_f64", &value);
            tag.field == 17 ? head.set_alpha_f64(value) : head.set_beta_f64(value);
            return s;
          }
        }
        return std::nullopt;
      });
  return Invalid("request", "gemm.v1.MatmulRequest", s);
}

absl::Status ParseQuantizedMatmulRequest(const ByteRuns& bytes, QuantizedMatmulRequestWire* out) {
  Fields f("");
  gemm::v1::QuantizedMatmulRequest& head = out->head;
  const absl::Status s = ForEachField(
      WireCursor(bytes), "gemm.v1.QuantizedMatmulRequest",
      [&](const Tag& tag, WireCursor* c) -> FieldResult {
        absl::Status s;
        switch (tag.field) {
          case 1:
            s = TensorField(f, c, tag, "a", head.mutable_a(), &out->a_data, &out->a_scales);
            break;
          case 2:
            s = TensorField(f, c, tag, "a_dense", head.mutable_a_dense(), &out->a_dense_data);
            break;
          case 3:
            return TensorField(f, c, tag, "b", head.mutable_b(), &out->b_data, &out->b_scales);
          case 4:
            return f.String(c, tag, "kernel", head.mutable_kernel());
          case 5:
            return SmallMessage(f, c, tag, "a_ref", head.mutable_a_ref());
          case 6:
            return SmallMessage(f, c, tag, "b_ref", head.mutable_b_ref());
          case 7:
            return SmallMessage(f, c, tag, "keep_c", head.mutable_keep_c());
          case 8:
            return SmallMessage(f, c, tag, "c_shm", head.mutable_c_shm());
          default:
            return std::nullopt;
        }
        // a and a_dense are one oneof: protobuf would keep the later one silently.
        if (s.ok() && f.Seen(1) && f.Seen(2)) {
          s = absl::InvalidArgumentError(
              "a and a_dense are both set; they are one choice (oneof a_operand), send one");
        }
        return s;
      });
  return Invalid("request", "gemm.v1.QuantizedMatmulRequest", s);
}

absl::Status ParseMatmulResponse(const ByteRuns& bytes, MatmulResponseWire* out) {
  Fields f("");
  gemm::v1::MatmulResponse& head = out->head;
  const absl::Status s = ForEachField(
      WireCursor(bytes), "gemm.v1.MatmulResponse",
      [&](const Tag& tag, WireCursor* c) -> FieldResult {
        absl::Status s;
        switch (tag.field) {
          case 1:
            return TensorField(f, c, tag, "c", head.mutable_c(), &out->c_data);
          case 2:
            return f.String(c, tag, "kernel", head.mutable_kernel());
          case 3:
            return f.String(c, tag, "device", head.mutable_device());
          case 4: {
            std::string timing;
            s = f.String(c, tag, "timing", &timing);
            if (s.ok() && !head.mutable_timing()->ParseFromString(timing)) {
              s = absl::InvalidArgumentError("timing is not a valid gemm.v1.Timing");
            }
            return s;
          }
          case 5: {
            int32_t precision = 0;
            s = f.Int32(c, tag, "precision", &precision);
            head.set_precision(static_cast<gemm::v1::Precision>(precision));
            return s;
          }
          case 6:
            return SmallMessage(f, c, tag, "c_ref", head.mutable_c_ref());
          case 7:
            return SmallMessage(f, c, tag, "row_plan", head.mutable_row_plan());
        }
        return std::nullopt;
      });
  return Invalid("response", "gemm.v1.MatmulResponse", s);
}

absl::Status ParseTensorChunk(const ByteRuns& bytes, TensorChunkWire* out) {
  Fields f("");
  const absl::Status s = ForEachField(
      WireCursor(bytes), "gemm.v1.TensorChunk", [&](const Tag& tag, WireCursor* c) -> FieldResult {
        switch (tag.field) {
          case 1:
            out->has_header = true;
            return SmallMessage(f, c, tag, "header", &out->header);
          case 2:
            return f.Payload(c, tag, "data", &out->data);
          case 3:
            return f.Payload(c, tag, "scales", &out->scales);
          case 4:
            out->has_data_shm = true;
            return SmallMessage(f, c, tag, "data_shm", &out->data_shm);
          case 5:
            out->has_scales_shm = true;
            return SmallMessage(f, c, tag, "scales_shm", &out->scales_shm);
        }
        return std::nullopt;
      });
  return Invalid("chunk", "gemm.v1.TensorChunk", s);
}

void EncodedMessage::AddOwned(absl::string_view bytes) {
  if (bytes.empty()) return;
  if (pieces_.empty() || pieces_.back().is_payload) pieces_.emplace_back();
  pieces_.back().owned.append(bytes.data(), bytes.size());
  size_ += bytes.size();
}

void EncodedMessage::AddPayload(absl::string_view bytes) {
  if (bytes.empty()) return;
  Piece piece;
  piece.is_payload = true;
  piece.payload = bytes;
  pieces_.push_back(std::move(piece));
  size_ += bytes.size();
}

std::string EncodedMessage::Flatten() const {
  std::string all;
  all.reserve(size_);
  for (const Piece& p : pieces_) {
    if (p.is_payload) {
      all.append(p.payload.data(), p.payload.size());
    } else {
      all += p.owned;
    }
  }
  return all;
}

namespace {

// Field `field` holding a message made of `head` (its serialized small fields) and then
// each (number, payload) as a bytes field.
void AddMessageWithPayloads(
    EncodedMessage* out, uint32_t field, const std::string& head,
    std::initializer_list<std::pair<uint32_t, absl::string_view>> payloads) {
  uint64_t length = head.size();
  for (const auto& [number, bytes] : payloads) length += LengthDelimitedSize(number, bytes.size());
  std::string prefix;
  AppendLengthDelimitedHead(&prefix, field, length);
  prefix += head;
  out->AddOwned(prefix);
  for (const auto& [number, bytes] : payloads) {
    std::string tag;
    AppendLengthDelimitedHead(&tag, number, bytes.size());
    out->AddOwned(tag);
    out->AddPayload(bytes);
  }
}

constexpr uint32_t kTensorData = gemm::v1::Tensor::kDataFieldNumber;
constexpr uint32_t kQuantizedData = gemm::v1::QuantizedTensor::kDataFieldNumber;
constexpr uint32_t kQuantizedScales = gemm::v1::QuantizedTensor::kScalesFieldNumber;

}  // namespace

EncodedMessage EncodeMatmulRequest(const gemm::v1::MatmulRequest& head, absl::string_view a_data,
                                   absl::string_view b_data, absl::string_view c_data) {
  EncodedMessage out;
  if (head.has_a()) {
    AddMessageWithPayloads(&out, gemm::v1::MatmulRequest::kAFieldNumber,
                           head.a().SerializeAsString(), {{kTensorData, a_data}});
  }
  if (head.has_b()) {
    AddMessageWithPayloads(&out, gemm::v1::MatmulRequest::kBFieldNumber,
                           head.b().SerializeAsString(), {{kTensorData, b_data}});
  }
  if (head.has_c()) {
    AddMessageWithPayloads(&out, gemm::v1::MatmulRequest::kCFieldNumber,
                           head.c().SerializeAsString(), {{kTensorData, c_data}});
  }
  gemm::v1::MatmulRequest rest = head;
  rest.clear_a();
  rest.clear_b();
  rest.clear_c();
  out.AddOwned(rest.SerializeAsString());
  return out;
}

EncodedMessage EncodeQuantizedMatmulRequest(const gemm::v1::QuantizedMatmulRequest& head,
                                            const QuantizedPayloads& p) {
  EncodedMessage out;
  if (head.has_a()) {
    AddMessageWithPayloads(&out, gemm::v1::QuantizedMatmulRequest::kAFieldNumber,
                           head.a().SerializeAsString(),
                           {{kQuantizedData, p.a_data}, {kQuantizedScales, p.a_scales}});
  } else if (head.has_a_dense()) {
    AddMessageWithPayloads(&out, gemm::v1::QuantizedMatmulRequest::kADenseFieldNumber,
                           head.a_dense().SerializeAsString(), {{kTensorData, p.a_dense_data}});
  }
  if (head.has_b()) {
    AddMessageWithPayloads(&out, gemm::v1::QuantizedMatmulRequest::kBFieldNumber,
                           head.b().SerializeAsString(),
                           {{kQuantizedData, p.b_data}, {kQuantizedScales, p.b_scales}});
  }
  gemm::v1::QuantizedMatmulRequest rest = head;
  rest.clear_a();
  rest.clear_a_dense();
  rest.clear_b();
  out.AddOwned(rest.SerializeAsString());
  return out;
}

EncodedMessage EncodeMatmulResponse(const gemm::v1::Tensor& c_head, absl::string_view c_data,
                                    const gemm::v1::MatmulResponse& rest) {
  EncodedMessage out;
  AddMessageWithPayloads(&out, gemm::v1::MatmulResponse::kCFieldNumber,
                         c_head.SerializeAsString(), {{kTensorData, c_data}});
  out.AddOwned(rest.SerializeAsString());
  return out;
}

EncodedMessage EncodeTensorChunk(const gemm::v1::TensorHeader* header, absl::string_view data,
                                 absl::string_view scales) {
  EncodedMessage out;
  std::string heads;
  if (header != nullptr) {
    const std::string bytes = header->SerializeAsString();
    AppendLengthDelimitedHead(&heads, gemm::v1::TensorChunk::kHeaderFieldNumber, bytes.size());
    heads += bytes;
  }
  if (!data.empty()) {
    AppendLengthDelimitedHead(&heads, gemm::v1::TensorChunk::kDataFieldNumber, data.size());
    out.AddOwned(heads);
    out.AddPayload(data);
    heads.clear();
  }
  if (!scales.empty()) {
    AppendLengthDelimitedHead(&heads, gemm::v1::TensorChunk::kScalesFieldNumber, scales.size());
    out.AddOwned(heads);
    out.AddPayload(scales);
    heads.clear();
  }
  out.AddOwned(heads);
  return out;
}

}  // namespace gemmd::wire
