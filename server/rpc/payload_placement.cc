#include "server/rpc/payload_placement.h"

#include <cstdint>
#include <cstring>

namespace gemmd {
namespace {

constexpr size_t kInPlaceAlignment = 16;  // what every kernel's vector loads need at most
constexpr size_t kBufferAlignment = 64;   // each copied payload starts on a cache line

size_t AlignUp(size_t n) { return (n + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }

}  // namespace

absl::StatusOr<PlacedPayloads> PlacePayloads(HostMemory* memory, HostCopier* copier,
                                             const std::vector<PayloadSlot>& payloads,
                                             bool pieces_ok) {
  PlacedPayloads placed;
  std::vector<bool> copy(payloads.size(), false);
  size_t bytes = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    const wire::ByteRuns& runs = *payloads[i].runs;
    const std::optional<absl::string_view> whole = runs.Contiguous();
    const bool aligned =
        whole && reinterpret_cast<uintptr_t>(whole->data()) % kInPlaceAlignment == 0;
    // A payload the device would read from page-locked memory is copied there (where
    // it arrived, its bytes still in this thread's cache, and not on the lane when its
    // batch launches); one it would stage anyway may stay where it arrived, whole or in
    // pieces.
    const bool staged = !memory->may_page_lock(runs.size());
    if (runs.empty() || (whole && aligned && (staged || payloads[i].in_region))) {
      *payloads[i].view = whole.value_or(absl::string_view());
      placed.uses_wire |= !runs.empty();
      continue;
    }
    if (pieces_ok && staged && payloads[i].pieces != nullptr) {
      *payloads[i].pieces = runs.runs();
      *payloads[i].view = absl::string_view(nullptr, runs.size());
      placed.uses_wire = true;
      continue;
    }
    copy[i] = true;
    bytes = AlignUp(bytes) + runs.size();
  }
  if (bytes == 0) return placed;
  absl::StatusOr<std::unique_ptr<HostBuffer>> buffer = memory->AcquireBuffer(bytes);
  if (!buffer.ok()) return buffer.status();
  placed.buffer = *std::move(buffer);
  std::vector<HostCopier::Task> tasks;
  size_t at = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (!copy[i]) continue;
    at = AlignUp(at);
    const wire::ByteRuns& runs = *payloads[i].runs;
    char* dst = placed.buffer->data() + at;
    *payloads[i].view = absl::string_view(dst, runs.size());
    for (absl::string_view run : runs.runs()) {
      tasks.push_back({dst, run.data(), run.size()});
      dst += run.size();
    }
    at += runs.size();
  }
  if (copier != nullptr) {
    copier->Copy(tasks);  // small totals stay on this thread
  } else {
    for (const HostCopier::Task& t : tasks) std::memcpy(t.dst, t.src, t.bytes);
  }
  return placed;
}

}  // namespace gemmd
