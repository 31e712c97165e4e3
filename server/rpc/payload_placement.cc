#include "server/rpc/payload_placement.h"

#include <cstdint>

namespace gemmd {
namespace {

constexpr size_t kInPlaceAlignment = 16;  // what every kernel's vector loads need at most
constexpr size_t kBufferAlignment = 64;   // each copied payload starts on a cache line

size_t AlignUp(size_t n) { return (n + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }

}  // namespace

absl::StatusOr<PlacedPayloads> PlacePayloads(
    HostMemory* memory,
    const std::vector<std::pair<const wire::ByteRuns*, absl::string_view*>>& payloads) {
  PlacedPayloads placed;
  std::vector<bool> copy(payloads.size(), false);
  size_t bytes = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    const wire::ByteRuns& runs = *payloads[i].first;
    const std::optional<absl::string_view> whole = runs.Contiguous();
    const bool aligned =
        whole && reinterpret_cast<uintptr_t>(whole->data()) % kInPlaceAlignment == 0;
    if (runs.empty() || (whole && aligned && !memory->page_locked())) {
      *payloads[i].second = whole.value_or(absl::string_view());
      placed.uses_wire |= !runs.empty();
      continue;
    }
    copy[i] = true;
    bytes = AlignUp(bytes) + runs.size();
  }
  if (bytes == 0) return placed;
  absl::StatusOr<std::unique_ptr<HostBuffer>> buffer = memory->AcquireBuffer(bytes);
  if (!buffer.ok()) return buffer.status();
  placed.buffer = *std::move(buffer);
  size_t at = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (!copy[i]) continue;
    at = AlignUp(at);
    const wire::ByteRuns& runs = *payloads[i].first;
    runs.CopyTo(placed.buffer->data() + at);
    *payloads[i].second = absl::string_view(placed.buffer->data() + at, runs.size());
    at += runs.size();
  }
  return placed;
}

}  // namespace gemmd
