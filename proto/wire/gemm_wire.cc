#include "proto/wire/gemm_wire.h"

#include <cstring>
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

// One message's known fields: each singular one may appear once, with its wire type.
class Fields {
 public:
  explicit Fields(std::string prefix) : prefix_(std::move(prefix)) {}

  std::string Name(absl::string_view field) const { return absl::StrCat(prefix_, field); }

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

  absl::Status Type(const Tag& tag, absl::string_view name, WireType want) const {
    if (tag.type == want) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(Name(name), " (field ", tag.field,
                                                   ") has wire type ", WireTypeName(tag.type),
                                                   "; expected ", WireTypeName(want)));
  }

  bool Seen(uint32_t field) const { return seen_ & (uint64_t{1} << (field & 63)); }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;  // "a." for a tensor field's parts, "" at the top
  uint64_t seen_ = 0;
};

absl::Status ReadBool(WireCursor* in, const std::string& what, bool* out) {
  uint64_t v = 0;
  if (absl::Status s = in->ReadVarint(&v, what); !s.ok()) return s;
  *out = v != 0;
  return absl::OkStatus();
}

// Enums and int32 fields take the low 32 bits of the varint, as protobuf does.
absl::Status ReadInt32(WireCursor* in, const std::string& what, int32_t* out) {
  uint64_t v = 0;
  if (absl::Status s = in->ReadVarint(&v, what); !s.ok()) return s;
  *out = static_cast<int32_t>(static_cast<uint32_t>(v));
  return absl::OkStatus();
}

absl::Status ReadFloat(WireCursor* in, const std::string& what, float* out) {
  uint32_t bits = 0;
  if (absl::Status s = in->ReadFixed32(&bits, what); !s.ok()) return s;
  std::memcpy(out, &bits, 4);
  return absl::OkStatus();
}

// A length-delimited field's contents as a cursor of their own.
absl::Status Nested(WireCursor* in, const std::string& what, WireCursor* out) {
  size_t length = 0;
  if (absl::Status s = in->ReadLength(&length, what); !s.ok()) return s;
  return in->TakeCursor(length, out, what);
}

absl::Status Payload(WireCursor* in, const std::string& what, ByteRuns* out) {
  size_t length = 0;
  if (absl::Status s = in->ReadLength(&length, what); !s.ok()) return s;
  return in->TakeRuns(length, out, what);
}

absl::Status SmallString(WireCursor* in, const std::string& what, std::string* out) {
  size_t length = 0;
  if (absl::Status s = in->ReadLength(&length, what); !s.ok()) return s;
  return in->TakeString(length, out, what);
}

// `repeated int64 shape`: packed (one length-delimited run of varints) or not (one
// varint per occurrence); both may appear, in any mix, as protobuf allows.
absl::Status ReadShape(WireCursor* in, const Tag& tag, const Fields& fields,
                       google::protobuf::RepeatedField<int64_t>* shape) {
  const std::string name = fields.Name("shape");
  auto add = [&](uint64_t v) {
    if (shape->size() >= kMaxShapeEntries) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has more than ", kMaxShapeEntries,
          " entries; expected [rows, cols] or [batch, rows, cols]"));
    }
    shape->Add(static_cast<int64_t>(v));
    return absl::OkStatus();
  };
  if (tag.type == WireType::kVarint) {
    uint64_t v = 0;
    if (absl::Status s = in->ReadVarint(&v, name); !s.ok()) return s;
    return add(v);
  }
  if (absl::Status s = fields.Type(tag, "shape", WireType::kLengthDelimited); !s.ok()) return s;
  WireCursor packed;
  if (absl::Status s = Nested(in, name, &packed); !s.ok()) return s;
  while (!packed.AtEnd()) {
    uint64_t v = 0;
    if (absl::Status s = packed.ReadVarint(&v, name); !s.ok()) return s;
    if (absl::Status s = add(v); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// gemm.v1.Tensor: shape = 1, dtype = 2, data = 3.
absl::Status ParseTensor(WireCursor in, const std::string& name, gemm::v1::Tensor* head,
                         ByteRuns* data) {
  Fields fields(name + ".");
  while (!in.AtEnd()) {
    Tag tag;
    if (absl::Status s = in.ReadTag(&tag); !s.ok()) return s;
    absl::Status s;
    switch (tag.field) {
      case 1:
        s = ReadShape(&in, tag, fields, head->mutable_shape());
        break;
      case 2: {
        int32_t dtype = 0;
        s = fields.Once(tag, "dtype", WireType::kVarint);
        if (s.ok()) s = ReadInt32(&in, fields.Name("dtype"), &dtype);
        head->set_dtype(static_cast<gemm::v1::DataType>(dtype));
        break;
      }
      case 3:
        s = fields.Once(tag, "data", WireType::kLengthDelimited);
        if (s.ok()) s = Payload(&in, fields.Name("data"), data);
        break;
      default:
        s = in.SkipValue(tag.type, tag.field, name);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// gemm.v1.QuantizedTensor: shape = 1, format = 2, data = 3, scales = 4, tensor_scale = 5.
absl::Status ParseQuantizedTensor(WireCursor in, const std::string& name,
                                  gemm::v1::QuantizedTensor* head, ByteRuns* data,
                                  ByteRuns* scales) {
  Fields fields(name + ".");
  while (!in.AtEnd()) {
    Tag tag;
    if (absl::Status s = in.ReadTag(&tag); !s.ok()) return s;
    absl::Status s;
    switch (tag.field) {
      case 1:
        s = ReadShape(&in, tag, fields, head->mutable_shape());
        break;
      case 2: {
        int32_t format = 0;
        s = fields.Once(tag, "format", WireType::kVarint);
        if (s.ok()) s = ReadInt32(&in, fields.Name("format"), &format);
        head->set_format(static_cast<gemm::v1::QuantFormat>(format));
        break;
      }
      case 3:
        s = fields.Once(tag, "data", WireType::kLengthDelimited);
        if (s.ok()) s = Payload(&in, fields.Name("data"), data);
        break;
      case 4:
        s = fields.Once(tag, "scales", WireType::kLengthDelimited);
        if (s.ok()) s = Payload(&in, fields.Name("scales"), scales);
        break;
      case 5: {
        float scale = 0;
        s = fields.Once(tag, "tensor_scale", WireType::kFixed32);
        if (s.ok()) s = ReadFloat(&in, fields.Name("tensor_scale"), &scale);
        head->set_tensor_scale(scale);
        break;
      }
      default:
        s = in.SkipValue(tag.type, tag.field, name);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Invalid(absl::string_view type, const absl::Status& s) {
  return absl::InvalidArgumentError(
      absl::StrCat("the request is not a valid ", type, ": ", s.message()));
}

}  // namespace

absl::Status ParseMatmulRequest(const ByteRuns& bytes, MatmulRequestWire* out) {
  WireCursor in(bytes);
  Fields fields("");
  gemm::v1::MatmulRequest& head = out->head;
  while (!in.AtEnd()) {
    Tag tag;
    absl::Status s = in.ReadTag(&tag);
    if (s.ok()) {
      switch (tag.field) {
        case 1:
        case 2:
        case 3: {
          const char* name = tag.field == 1 ? "a" : tag.field == 2 ? "b" : "c";
          gemm::v1::Tensor* tensor = tag.field == 1   ? head.mutable_a()
                                     : tag.field == 2 ? head.mutable_b()
                                                      : head.mutable_c();
          ByteRuns* data = tag.field == 1   ? &out->a_data
                           : tag.field == 2 ? &out->b_data
                                            : &out->c_data;
          WireCursor nested;
          s = fields.Once(tag, name, WireType::kLengthDelimited);
          if (s.ok()) s = Nested(&in, name, &nested);
          if (s.ok()) s = ParseTensor(nested, name, tensor, data);
          break;
        }
        case 4:
        case 5: {
          const char* name = tag.field == 4 ? "alpha" : "beta";
          float value = 0;
          s = fields.Once(tag, name, WireType::kFixed32);
          if (s.ok()) s = ReadFloat(&in, name, &value);
          tag.field == 4 ? head.set_alpha(value) : head.set_beta(value);
          break;
        }
        case 6:
        case 7: {
          const char* name = tag.field == 6 ? "transpose_a" : "transpose_b";
          bool value = false;
          s = fields.Once(tag, name, WireType::kVarint);
          if (s.ok()) s = ReadBool(&in, name, &value);
          tag.field == 6 ? head.set_transpose_a(value) : head.set_transpose_b(value);
          break;
        }
        case 8:
        case 9: {
          const char* name = tag.field == 8 ? "precision" : "output_dtype";
          int32_t value = 0;
          s = fields.Once(tag, name, WireType::kVarint);
          if (s.ok()) s = ReadInt32(&in, name, &value);
          if (tag.field == 8) {
            head.set_precision(static_cast<gemm::v1::Precision>(value));
          } else {
            head.set_output_dtype(static_cast<gemm::v1::DataType>(value));
          }
          break;
        }
        case 10:
          s = fields.Once(tag, "kernel", WireType::kLengthDelimited);
          if (s.ok()) s = SmallString(&in, "kernel", head.mutable_kernel());
          break;
        default:
          s = in.SkipValue(tag.type, tag.field, "gemm.v1.MatmulRequest");
      }
    }
    if (!s.ok()) return Invalid("gemm.v1.MatmulRequest", s);
  }
  return absl::OkStatus();
}

absl::Status ParseQuantizedMatmulRequest(const ByteRuns& bytes, QuantizedMatmulRequestWire* out) {
  WireCursor in(bytes);
  Fields fields("");
  gemm::v1::QuantizedMatmulRequest& head = out->head;
  while (!in.AtEnd()) {
    Tag tag;
    absl::Status s = in.ReadTag(&tag);
    if (s.ok()) {
      switch (tag.field) {
        case 1:
        case 3: {
          const char* name = tag.field == 1 ? "a" : "b";
          WireCursor nested;
          s = fields.Once(tag, name, WireType::kLengthDelimited);
          if (s.ok()) s = Nested(&in, name, &nested);
          if (s.ok()) {
            s = tag.field == 1 ? ParseQuantizedTensor(nested, name, head.mutable_a(),
                                                      &out->a_data, &out->a_scales)
                               : ParseQuantizedTensor(nested, name, head.mutable_b(),
                                                      &out->b_data, &out->b_scales);
          }
          break;
        }
        case 2: {
          WireCursor nested;
          s = fields.Once(tag, "a_dense", WireType::kLengthDelimited);
          if (s.ok()) s = Nested(&in, "a_dense", &nested);
          if (s.ok()) s = ParseTensor(nested, "a_dense", head.mutable_a_dense(), &out->a_dense_data);
          break;
        }
        case 4:
          s = fields.Once(tag, "kernel", WireType::kLengthDelimited);
          if (s.ok()) s = SmallString(&in, "kernel", head.mutable_kernel());
          break;
        default:
          s = in.SkipValue(tag.type, tag.field, "gemm.v1.QuantizedMatmulRequest");
      }
      // a and a_dense are one oneof: protobuf would keep the later one silently.
      if (s.ok() && fields.Seen(1) && fields.Seen(2)) {
        s = absl::InvalidArgumentError(
            "a and a_dense are both set; they are one choice (oneof a_operand), send one");
      }
    }
    if (!s.ok()) return Invalid("gemm.v1.QuantizedMatmulRequest", s);
  }
  return absl::OkStatus();
}

absl::Status ParseMatmulResponse(const ByteRuns& bytes, MatmulResponseWire* out) {
  WireCursor in(bytes);
  Fields fields("");
  gemm::v1::MatmulResponse& head = out->head;
  while (!in.AtEnd()) {
    Tag tag;
    absl::Status s = in.ReadTag(&tag);
    if (s.ok()) {
      switch (tag.field) {
        case 1: {
          WireCursor nested;
          s = fields.Once(tag, "c", WireType::kLengthDelimited);
          if (s.ok()) s = Nested(&in, "c", &nested);
          if (s.ok()) s = ParseTensor(nested, "c", head.mutable_c(), &out->c_data);
          break;
        }
        case 2:
        case 3: {
          const char* name = tag.field == 2 ? "kernel" : "device";
          s = fields.Once(tag, name, WireType::kLengthDelimited);
          if (s.ok()) {
            s = SmallString(&in, name,
                            tag.field == 2 ? head.mutable_kernel() : head.mutable_device());
          }
          break;
        }
        case 4: {
          std::string timing;
          s = fields.Once(tag, "timing", WireType::kLengthDelimited);
          if (s.ok()) s = SmallString(&in, "timing", &timing);
          if (s.ok() && !head.mutable_timing()->ParseFromString(timing)) {
            s = absl::InvalidArgumentError("timing is not a valid gemm.v1.Timing");
          }
          break;
        }
        case 5: {
          int32_t precision = 0;
          s = fields.Once(tag, "precision", WireType::kVarint);
          if (s.ok()) s = ReadInt32(&in, "precision", &precision);
          head.set_precision(static_cast<gemm::v1::Precision>(precision));
          break;
        }
        default:
          s = in.SkipValue(tag.type, tag.field, "gemm.v1.MatmulResponse");
      }
    }
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the response is not a valid gemm.v1.MatmulResponse: ", s.message()));
    }
  }
  return absl::OkStatus();
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
  AddMessageWithPayloads(&out, gemm::v1::MatmulRequest::kAFieldNumber,
                         head.a().SerializeAsString(), {{kTensorData, a_data}});
  AddMessageWithPayloads(&out, gemm::v1::MatmulRequest::kBFieldNumber,
                         head.b().SerializeAsString(), {{kTensorData, b_data}});
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
  AddMessageWithPayloads(&out, gemm::v1::QuantizedMatmulRequest::kBFieldNumber,
                         head.b().SerializeAsString(),
                         {{kQuantizedData, p.b_data}, {kQuantizedScales, p.b_scales}});
  gemm::v1::QuantizedMatmulRequest rest;
  rest.set_kernel(head.kernel());
  out.AddOwned(rest.SerializeAsString());
  return out;
}

EncodedMessage EncodeMatmulResponse(const gemm::v1::MatmulResponse& head,
                                    absl::string_view c_data) {
  EncodedMessage out;
  AddMessageWithPayloads(&out, gemm::v1::MatmulResponse::kCFieldNumber,
                         head.c().SerializeAsString(), {{kTensorData, c_data}});
  gemm::v1::MatmulResponse rest = head;
  rest.clear_c();
  out.AddOwned(rest.SerializeAsString());
  return out;
}

}  // namespace gemmd::wire
