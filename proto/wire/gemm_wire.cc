#include "proto/wire/gemm_wire.h"

#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gemmd::wire {
namespace {

const char* WireTypeName(WireType type) {
  switch (type) {
    case WireType::kVarint: return "varint";
    case WireType::kFixed64: return "fixed64";
    case WireType::kLengthDelimited: return "length-delimited";
    case WireType::kStartGroup: return "start-group";
    case WireType::kEndGroup: return "end-group";
    case WireType::kFixed32: return "fixed32";
  }
  return "unknown";
}

// One message's known fields: each singular one may appear once, with its wire type,
// and is read by the typed helpers below (errors name the field: prefix + name).
class Fields {
 public:
  explicit Fields(std::string prefix) : prefix_(std::move(prefix)) {}

  std::string Name(absl::string_view field) const { return absl::StrCat(prefix_, field); }

  absl::Status Type(const Tag& tag, absl::string_view name, WireType want) const {
    if (tag.type == want) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(Name(name), " (field ", tag.field,
                                                   ") has wire type ", WireTypeName(tag.type),
                                                   "; expected ", WireTypeName(want)));
  }

  // Enums and int32 fields take the low 32 bits of the varint, as protobuf does.
  absl::Status Int32(WireCursor* in, const Tag& tag, absl::string_view name, int32_t* out) {
    uint64_t v = 0;
    absl::Status s = Once(tag, name, WireType::kVarint);
    if (s.ok()) s = in->ReadVarint(&v, Name(name));
    *out = static_cast<int32_t>(static_cast<uint32_t>(v));
    return s;
  }

  absl::Status Bool(WireCursor* in, const Tag& tag, absl::string_view name, bool* out) {
    uint64_t v = 0;
    absl::Status s = Once(tag, name, WireType::kVarint);
    if (s.ok()) s = in->ReadVarint(&v, Name(name));
    *out = v != 0;
    return s;
  }

  absl::Status Float(WireCursor* in, const Tag& tag, absl::string_view name, float* out) {
    uint32_t bits = 0;
    absl::Status s = Once(tag, name, WireType::kFixed32);
    if (s.ok()) s = in->ReadFixed32(&bits, Name(name));
    std::memcpy(out, &bits, 4);
    return s;
  }

  // A length-delimited field's contents as a cursor of their own (a nested message).
  absl::Status Message(WireCursor* in, const Tag& tag, absl::string_view name,
                       WireCursor* out) {
    size_t length = 0;
    absl::Status s = Once(tag, name, WireType::kLengthDelimited);
    if (s.ok()) s = in->ReadLength(&length, Name(name));
    if (s.ok()) s = in->TakeCursor(length, out, Name(name));
    return s;
  }

  // A bytes field left where it is (a tensor payload).
  absl::Status Payload(WireCursor* in, const Tag& tag, absl::string_view name, ByteRuns* out) {
    size_t length = 0;
    absl::Status s = Once(tag, name, WireType::kLengthDelimited);
    if (s.ok()) s = in->ReadLength(&length, Name(name));
    if (s.ok()) s = in->TakeRuns(length, out, Name(name));
    return s;
  }

  // A small string field, copied (names, nested headers).
  absl::Status String(WireCursor* in, const Tag& tag, absl::string_view name,
                      std::string* out) {
    size_t length = 0;
    absl::Status s = Once(tag, name, WireType::kLengthDelimited);
    if (s.ok()) s = in->ReadLength(&length, Name(name));
    if (s.ok()) s = in->TakeString(length, out, Name(name));
    return s;
  }

  // `repeated int64 shape`: packed (one length-delimited run of varints) or not (one
  // varint per occurrence); both may appear, in any mix, as protobuf allows.
  absl::Status Shape(WireCursor* in, const Tag& tag,
                     google::protobuf::RepeatedField<int64_t>* shape) const {
    const std::string name = Name("shape");
    auto add = [&](uint64_t v) {
      if (shape->size() >= kMaxShapeEntries) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, " has more than ", kMaxShapeEntries,
            " entries; expected [rows, cols] or [batch, rows, cols]"));
      }
      shape->Add(static_cast<int64_t>(v));
      return absl::OkStatus();
    };
    uint64_t v = 0;
    if (tag.type == WireType::kVarint) {
      if (absl::Status s = in->ReadVarint(&v, name); !s.ok()) return s;
      return add(v);
    }
    if (absl::Status s = Type(tag, "shape", WireType::kLengthDelimited); !s.ok()) return s;
    size_t length = 0;
    WireCursor packed;
    if (absl::Status s = in->ReadLength(&length, name); !s.ok()) return s;
    if (absl::Status s = in->TakeCursor(length, &packed, name); !s.ok()) return s;
    while (!packed.AtEnd()) {
      if (absl::Status s = packed.ReadVarint(&v, name); !s.ok()) return s;
      if (absl::Status s = add(v); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  bool Seen(uint32_t field) const { return seen_ & (uint64_t{1} << (field & 63)); }

 private:
  // OK when `tag` may be read as singular field `name` of wire type `want`.
  absl::Status Once(const Tag& tag, absl::string_view name, WireType want) {
    if (absl::Status s = Type(tag, name, want); !s.ok()) return s;
    const uint64_t bit = uint64_t{1} << (tag.field & 63);
    if (seen_ & bit) {
      return absl::InvalidArgumentError(absl::StrCat(
          Name(name), " (field ", tag.field, ") appears twice; each field may appear once"));
    }
    seen_ |= bit;
    return absl::OkStatus();
  }

  std::string prefix_;  // "a." for a tensor field's parts, "" at the top
  uint64_t seen_ = 0;
};

// Reads a message's fields in order. `known(tag, &cursor)` reads a field whose number it
// knows and returns its status, or nullopt for one it does not (skipped, as protobuf
// keeps unknown fields).
template <typename Known>
absl::Status ForEachField(WireCursor in, absl::string_view where, Known known) {
  while (!in.AtEnd()) {
    Tag tag;
    if (absl::Status s = in.ReadTag(&tag); !s.ok()) return s;
    const std::optional<absl::Status> read = known(tag, &in);
    const absl::Status s = read ? *read : in.SkipValue(tag.type, tag.field, where);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

using FieldResult = std::optional<absl::Status>;

// A small nested message (a handle, an option), copied and parsed by protobuf.
template <typename Message>
absl::Status SmallMessage(Fields& f, WireCursor* c, const Tag& tag, absl::string_view name,
                          Message* out) {
  std::string bytes;
  absl::Status s = f.String(c, tag, name, &bytes);
  if (s.ok() && !out->ParseFromString(bytes)) {
    s = absl::InvalidArgumentError(
        absl::StrCat(f.Name(name), " is not a valid ", out->GetTypeName()));
  }
  return s;
}

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

absl::Status Invalid(absl::string_view what, absl::string_view type, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::InvalidArgumentError(
      absl::StrCat("the ", what, " is not a valid ", type, ": ", s.message()));
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
