// Protobuf's wire format read straight from a received message's pieces, and the few
// helpers that write a message around payloads it does not copy. The GEMM messages'
// hand-written parsers and encoders (gemm_wire.h) are built on these.
//
// Why by hand: a tensor's bytes should be located where gRPC received them (a list of
// slices) and copied once, to where the device reads them; the generated parser copies
// every `bytes` field into a std::string first. Everything here reads only the bytes it
// is given: every length is checked against what remains before anything is sized by it.
// Thread-compatible (plain values).
#ifndef GEMMD_PROTO_WIRE_WIRE_FORMAT_H_
#define GEMMD_PROTO_WIRE_WIRE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemmd::wire {

// A byte sequence held in pieces, in order (e.g. the slices of a received message).
// Views only: whoever made it keeps the pieces alive.
class ByteRuns {
 public:
  ByteRuns() = default;
  explicit ByteRuns(absl::string_view whole) { Append(whole); }

  void Append(absl::string_view run) {
    if (run.empty()) return;
    runs_.push_back(run);
    size_ += run.size();
  }
  const std::vector<absl::string_view>& runs() const { return runs_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The bytes as one view when they are in one piece (or there are none).
  std::optional<absl::string_view> Contiguous() const;
  // Copies all size() bytes to `out`.
  void CopyTo(char* out) const;

 private:
  std::vector<absl::string_view> runs_;
  size_t size_ = 0;
};

// Wire types (the low three bits of a tag).
enum class WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

struct Tag {
  uint32_t field = 0;
  WireType type = WireType::kVarint;
};

// Reads a bounded range of a ByteRuns front to back. Errors are INVALID_ARGUMENT with a
// message naming what was being read (`what`, e.g. "a.data"); a failed read leaves the
// cursor unspecified, so parsing stops at the first error.
class WireCursor {
 public:
  WireCursor() = default;  // empty
  explicit WireCursor(const ByteRuns& bytes);

  bool AtEnd() const { return remaining_ == 0; }
  size_t remaining() const { return remaining_; }
  size_t position() const { return position_; }  // bytes read since the start of the whole

  absl::Status ReadTag(Tag* tag);
  absl::Status ReadVarint(uint64_t* value, absl::string_view what);
  absl::Status ReadFixed32(uint32_t* value, absl::string_view what);
  absl::Status ReadFixed64(uint64_t* value, absl::string_view what);
  // A length prefix, checked against the bytes that remain.
  absl::Status ReadLength(size_t* length, absl::string_view what);
  // The next `length` bytes as views into the runs (no copy).
  absl::Status TakeRuns(size_t length, ByteRuns* out, absl::string_view what);
  // The next `length` bytes as a cursor of their own (this one moves past them).
  absl::Status TakeCursor(size_t length, WireCursor* out, absl::string_view what);
  // The next `length` bytes copied into `out` (for small fields: names, nested headers).
  absl::Status TakeString(size_t length, std::string* out, absl::string_view what);
  // Moves past a field's value of wire type `type` (an unknown field). Groups are refused.
  absl::Status SkipValue(WireType type, uint32_t field, absl::string_view where);

 private:
  WireCursor(const std::vector<absl::string_view>* runs, size_t run, size_t offset,
             size_t position, size_t remaining)
      : runs_(runs), run_(run), offset_(offset), position_(position), remaining_(remaining) {}
  absl::Status Truncated(absl::string_view what, size_t needed) const;
  // `bytes` bytes into `value` (a fixed32 or fixed64).
  absl::Status ReadFixed(void* value, size_t bytes, absl::string_view what);
  // Moves `n` (<= remaining_) bytes on, calling visit(view) for each piece crossed.
  template <typename Visit>
  void Advance(size_t n, Visit visit);

  const std::vector<absl::string_view>* runs_ = nullptr;
  size_t run_ = 0;     // current run
  size_t offset_ = 0;  // in the current run
  size_t position_ = 0;
  size_t remaining_ = 0;
};

// Writing: a length-delimited field's tag and length, so a message can be sent as
// [prefix][payload the caller owns][rest] without copying the payload.
size_t VarintSize(uint64_t value);
void AppendVarint(std::string* out, uint64_t value);
void AppendLengthDelimitedHead(std::string* out, uint32_t field, uint64_t length);
size_t LengthDelimitedSize(uint32_t field, uint64_t length);  // head + length

}  // namespace gemmd::wire

#endif  // GEMMD_PROTO_WIRE_WIRE_FORMAT_H_
