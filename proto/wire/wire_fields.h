// The pieces protobuf messages are parsed from by hand (gemm_wire.cc, stream_wire.cc):
// a message's known fields, each read once with its wire type, errors naming the field.
// Internal to proto/wire. Thread-compatible.
#ifndef GEMMD_PROTO_WIRE_WIRE_FIELDS_H_
#define GEMMD_PROTO_WIRE_WIRE_FIELDS_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_field.h"
#include "proto/wire/gemm_wire.h"
#include "proto/wire/wire_format.h"

namespace gemmd::wire {

inline const char* WireTypeName(WireType type) {
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

  absl::Status Uint64(WireCursor* in, const Tag& tag, absl::string_view name, uint64_t* out) {
    absl::Status s = Once(tag, name, WireType::kVarint);
    if (s.ok()) s = in->ReadVarint(out, Name(name));
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

  absl::Status Double(WireCursor* in, const Tag& tag, absl::string_view name, double* out) {
    uint64_t bits = 0;
    absl::Status s = Once(tag, name, WireType::kFixed64);
    if (s.ok()) s = in->ReadFixed64(&bits, Name(name));
    std::memcpy(out, &bits, 8);
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

// `s` as the error of a whole message: "the WHAT is not a valid TYPE: ...".
inline absl::Status Invalid(absl::string_view what, absl::string_view type, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::InvalidArgumentError(
      absl::StrCat("the ", what, " is not a valid ", type, ": ", s.message()));
}

}  // namespace gemmd::wire

#endif  // GEMMD_PROTO_WIRE_WIRE_FIELDS_H_
