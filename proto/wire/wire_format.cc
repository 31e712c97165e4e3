#include "proto/wire/wire_format.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemmd::wire {

std::optional<absl::string_view> ByteRuns::Contiguous() const {
  if (runs_.empty()) return absl::string_view();
  if (runs_.size() == 1) return runs_.front();
  return std::nullopt;
}

void ByteRuns::CopyTo(char* out) const {
  for (absl::string_view run : runs_) {
    std::memcpy(out, run.data(), run.size());
    out += run.size();
  }
}

WireCursor::WireCursor(const ByteRuns& bytes)
    : runs_(&bytes.runs()), run_(0), offset_(0), position_(0), remaining_(bytes.size()) {}

template <typename Visit>
void WireCursor::Advance(size_t n, Visit visit) {
  remaining_ -= n;
  position_ += n;
  while (n > 0) {
    const absl::string_view run = (*runs_)[run_];
    const size_t take = std::min(n, run.size() - offset_);
    visit(run.substr(offset_, take));
    offset_ += take;
    n -= take;
    if (offset_ == run.size()) {
      ++run_;
      offset_ = 0;
    }
  }
}

absl::Status WireCursor::Truncated(absl::string_view what, size_t needed) const {
  return absl::InvalidArgumentError(absl::StrCat(what, " at byte ", position_, " needs ", needed,
                                                 " bytes but only ", remaining_,
                                                 " remain (truncated or overlapping field)"));
}

absl::Status WireCursor::ReadVarint(uint64_t* value, absl::string_view what) {
  uint64_t result = 0;
  for (int i = 0; i < 10; ++i) {
    if (remaining_ == 0) return Truncated(what, 1);
    uint8_t byte = 0;
    Advance(1, [&byte](absl::string_view v) { byte = static_cast<uint8_t>(v[0]); });
    result |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
    if ((byte & 0x80) == 0) {
      // The tenth byte may carry only the top bit of 64.
      if (i == 9 && byte > 1) break;
      *value = result;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " at byte ", position_, " is not a valid varint (over 64 bits)"));
}

absl::Status WireCursor::ReadTag(Tag* tag) {
  uint64_t raw = 0;
  const size_t start = position_;
  if (absl::Status s = ReadVarint(&raw, "a field tag"); !s.ok()) return s;
  const uint64_t field = raw >> 3;
  const uint32_t type = static_cast<uint32_t>(raw & 7);
  // A tag is a 32-bit varint (at most 5 bytes), as protobuf reads it.
  if (position_ - start > 5 || field == 0 || field > 0x1FFFFFFF || type > 5) {
    return absl::InvalidArgumentError(absl::StrCat("invalid field tag ", raw, " before byte ",
                                                   position_, " (field ", field, ", wire type ",
                                                   type, ")"));
  }
  tag->field = static_cast<uint32_t>(field);
  tag->type = static_cast<WireType>(type);
  return absl::OkStatus();
}

absl::Status WireCursor::ReadFixed(void* value, size_t bytes, absl::string_view what) {
  if (remaining_ < bytes) return Truncated(what, bytes);
  char* at = static_cast<char*>(value);
  // Little-endian on the wire, as on every host this builds for: the bytes as they come.
  Advance(bytes, [&at](absl::string_view v) {
    std::memcpy(at, v.data(), v.size());
    at += v.size();
  });
  return absl::OkStatus();
}

absl::Status WireCursor::ReadFixed32(uint32_t* value, absl::string_view what) {
  return ReadFixed(value, sizeof(*value), what);
}

absl::Status WireCursor::ReadFixed64(uint64_t* value, absl::string_view what) {
  return ReadFixed(value, sizeof(*value), what);
}

absl::Status WireCursor::ReadLength(size_t* length, absl::string_view what) {
  uint64_t raw = 0;
  const size_t start = position_;
  if (absl::Status s = ReadVarint(&raw, what); !s.ok()) return s;
  // A length is a 32-bit varint of at most 2^31 - 1, as protobuf reads it.
  if (position_ - start > 5 || raw > 0x7FFFFFFF) {
    return absl::InvalidArgumentError(absl::StrCat(what, " before byte ", position_,
                                                   " has a length prefix that is not a "
                                                   "32-bit size"));
  }
  if (raw > remaining_) {
    return absl::InvalidArgumentError(absl::StrCat(what, " at byte ", position_, " claims ", raw,
                                                   " bytes but only ", remaining_,
                                                   " remain (truncated or overlapping field)"));
  }
  *length = static_cast<size_t>(raw);
  return absl::OkStatus();
}

absl::Status WireCursor::TakeRuns(size_t length, ByteRuns* out, absl::string_view what) {
  if (length > remaining_) return Truncated(what, length);
  Advance(length, [out](absl::string_view v) { out->Append(v); });
  return absl::OkStatus();
}

absl::Status WireCursor::TakeCursor(size_t length, WireCursor* out, absl::string_view what) {
  if (length > remaining_) return Truncated(what, length);
  // Past a run's end, the sub-cursor starts at the next run (Advance never leaves
  // offset_ at a run's end, so this holds already).
  *out = WireCursor(runs_, run_, offset_, position_, length);
  Advance(length, [](absl::string_view) {});
  return absl::OkStatus();
}

absl::Status WireCursor::TakeString(size_t length, std::string* out, absl::string_view what) {
  if (length > remaining_) return Truncated(what, length);
  out->clear();
  out->reserve(length);
  Advance(length, [out](absl::string_view v) { out->append(v.data(), v.size()); });
  return absl::OkStatus();
}

absl::Status WireCursor::SkipValue(WireType type, uint32_t field, absl::string_view where) {
  const std::string what = absl::StrCat("unknown field ", field, " of ", where);
  switch (type) {
    case WireType::kVarint: {
      uint64_t ignored = 0;
      return ReadVarint(&ignored, what);
    }
    case WireType::kFixed64:
      if (remaining_ < 8) return Truncated(what, 8);
      Advance(8, [](absl::string_view) {});
      return absl::OkStatus();
    case WireType::kFixed32:
      if (remaining_ < 4) return Truncated(what, 4);
      Advance(4, [](absl::string_view) {});
      return absl::OkStatus();
    case WireType::kLengthDelimited: {
      size_t length = 0;
      if (absl::Status s = ReadLength(&length, what); !s.ok()) return s;
      Advance(length, [](absl::string_view) {});
      return absl::OkStatus();
    }
    case WireType::kStartGroup:
    case WireType::kEndGroup:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " uses the group wire type, which this API never sends"));
}

size_t VarintSize(uint64_t value) {
  size_t bytes = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++bytes;
  }
  return bytes;
}

void AppendVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendLengthDelimitedHead(std::string* out, uint32_t field, uint64_t length) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) |
                        static_cast<uint64_t>(WireType::kLengthDelimited));
  AppendVarint(out, length);
}

size_t LengthDelimitedSize(uint32_t field, uint64_t length) {
  return VarintSize(static_cast<uint64_t>(field) << 3) + VarintSize(length) + length;
}

}  // namespace gemmd::wire
