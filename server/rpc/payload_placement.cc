#include "server/rpc/payload_placement.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace gemmd {
namespace {

constexpr size_t kInPlaceAlignment = 16;  // what every kernel's vector loads need at most
constexpr size_t kBufferAlignment = 64;   // each copied payload starts on a cache line

size_t AlignUp(size_t n) { return (n + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }

enum class Placement { kInPlace, kPieces, kCopied };

// Where each payload goes. `use_pool`: a payload of a size the pool of page-locked blocks
// may serve counts as one the device reads page-locked, so it is copied (where it arrived,
// its bytes still in this thread's cache, and not on the lane when its batch launches);
// otherwise only sizes that are always page-locked do. One the device would stage anyway
// may stay where it arrived, whole or in pieces. `*pool_decided`: whether the pool's sizes
// changed any payload's placement.
std::vector<Placement> PlanPlacements(const HostMemory& memory,
                                      const std::vector<PayloadSlot>& payloads, bool pieces_ok,
                                      bool use_pool, bool* pool_decided) {
  *pool_decided = false;
  std::vector<Placement> plan;
  plan.reserve(payloads.size());
  for (const PayloadSlot& slot : payloads) {
    const wire::ByteRuns& runs = *slot.runs;
    const std::optional<absl::string_view> whole = runs.Contiguous();
    const bool aligned =
        whole && reinterpret_cast<uintptr_t>(whole->data()) % kInPlaceAlignment == 0;
    const bool staged =
        use_pool ? !memory.may_page_lock(runs.size()) : !memory.page_locked(runs.size());
    *pool_decided |= staged != !memory.page_locked(runs.size());
    if (runs.empty() || (whole && aligned && (staged || slot.in_region))) {
      plan.push_back(Placement::kInPlace);
    } else if (pieces_ok && staged && slot.pieces != nullptr) {
      plan.push_back(Placement::kPieces);
    } else {
      plan.push_back(Placement::kCopied);
    }
  }
  return plan;
}

// The bytes of the one buffer the copied payloads share, each on a cache line.
size_t CopiedBytes(const std::vector<PayloadSlot>& payloads, const std::vector<Placement>& plan) {
  size_t bytes = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (plan[i] == Placement::kCopied) bytes = AlignUp(bytes) + payloads[i].runs->size();
  }
  return bytes;
}

}  // namespace

absl::StatusOr<PlacedPayloads> PlacePayloads(HostMemory* memory, HostCopier* copier,
                                             const std::vector<PayloadSlot>& payloads,
                                             bool pieces_ok) {
  bool pool_decided = false;
  std::vector<Placement> plan =
      PlanPlacements(*memory, payloads, pieces_ok, /*use_pool=*/true, &pool_decided);
  size_t bytes = CopiedBytes(payloads, plan);
  // The copied payloads share one buffer: when its size can never be page-locked, a copy
  // into it would only be staged again, so the pool's sizes are left as smaller ones are.
  if (pool_decided && !memory->may_page_lock(bytes)) {
    plan = PlanPlacements(*memory, payloads, pieces_ok, /*use_pool=*/false, &pool_decided);
    bytes = CopiedBytes(payloads, plan);
  }
  PlacedPayloads placed;
  for (size_t i = 0; i < payloads.size(); ++i) {
    const wire::ByteRuns& runs = *payloads[i].runs;
    if (plan[i] == Placement::kInPlace) {
      *payloads[i].view = runs.Contiguous().value_or(absl::string_view());
      placed.uses_wire |= !runs.empty();
    } else if (plan[i] == Placement::kPieces) {
      *payloads[i].pieces = runs.runs();
      *payloads[i].view = absl::string_view(nullptr, runs.size());
      placed.uses_wire = true;
    }
  }
  if (bytes == 0) return placed;
  absl::StatusOr<std::unique_ptr<HostBuffer>> buffer = memory->AcquireBuffer(bytes);
  if (!buffer.ok()) return buffer.status();
  placed.buffer = *std::move(buffer);
  std::vector<HostCopier::Task> tasks;
  size_t at = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (plan[i] != Placement::kCopied) continue;
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
