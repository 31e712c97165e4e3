#include "server/devices/cuda/arena_plan.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

const DeviceOperands& ResidentOf(const LaunchItem& item) {
  static const DeviceOperands kNotResident;
  return item.resident != nullptr ? *item.resident : kNotResident;
}

// Bytes of item j's piece of a region (LayoutOf gives the starts and the total).
int64_t Span(const std::vector<int64_t>& offsets, int64_t region_bytes, size_t j) {
  return (j + 1 < offsets.size() ? offsets[j + 1] : region_bytes) - offsets[j];
}

absl::Status CheckHostBuffers(const DeviceLaunch& launch) {
  static const HostPieces kNone;
  for (size_t j = 0; j < launch.items.size(); ++j) {
    const GemmProblem& p = launch.items[j].problem;
    const GemmOperands& host = launch.items[j].host;
    const HostPieces& pieces = launch.items[j].pieces ? *launch.items[j].pieces : kNone;
    const DeviceOperands& r = ResidentOf(launch.items[j]);
    // A stacked launch reads B once, the first item's.
    const bool needs_b = !launch.stacked || j == 0;
    const bool missing =
        (p.ElementsA() > 0 && host.a == nullptr && pieces.a.empty() && r.a == nullptr) ||
        (needs_b && p.ElementsB() > 0 && host.b == nullptr && pieces.b.empty() && r.b == nullptr) ||
        (p.beta != 0.0f && p.ElementsCIn() > 0 && host.c_in == nullptr && pieces.c_in.empty() &&
         r.c_in == nullptr) ||
        (p.ElementsC() > 0 && host.c_out == nullptr && r.c_out == nullptr);
    if (missing) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", j, " of the launch is missing a host operand buffer"));
    }
  }
  return absl::OkStatus();
}

// The resident B every item of the launch reads (the device memory of one tensor), or
// null when B comes from the host.
const void* SharedResidentB(const DeviceLaunch& launch) {
  const void* b = nullptr;
  for (const LaunchItem& item : launch.items) {
    const void* mine = ResidentOf(item).b;
    if (mine == nullptr || (b != nullptr && mine != b)) return nullptr;
    b = mine;
    if (launch.stacked) break;
  }
  return b;
}

// An operand resident on the device (on_device), at `host`, or (host null) in `pieces`
// back to back.
void AddIn(const void* on_device, const void* host, const std::vector<absl::string_view>* pieces,
           int64_t at, int64_t bytes, std::vector<ArenaCopyIn>* in) {
  if (on_device != nullptr) {
    in->push_back({on_device, at, bytes, true});
    return;
  }
  if (host != nullptr || pieces == nullptr) {
    in->push_back({host, at, bytes});
    return;
  }
  for (absl::string_view piece : *pieces) {
    const int64_t n = std::min<int64_t>(bytes, static_cast<int64_t>(piece.size()));
    if (n <= 0) break;
    in->push_back({piece.data(), at, n});
    at += n;
    bytes -= n;
  }
}

}  // namespace

absl::StatusOr<DenseArena> PlanDenseArena(const DeviceLaunch& launch) {
  if (launch.items.empty()) return absl::InvalidArgumentError("empty launch");
  if (absl::Status s = CheckHostBuffers(launch); !s.ok()) return s;
  const GemmProblem& problem = launch.problem;
  const LaunchLayout layout = LayoutOf(launch.items);
  DenseArena arena;
  arena.reads_c_in = problem.beta != 0.0f;
  // FP16/BF16 C goes through FP32 copies; FP32 and FP64 kernels write their own C.
  arena.converts = problem.c_type == DataType::kFloat16 || problem.c_type == DataType::kBFloat16;
  arena.c_in_elements = arena.reads_c_in ? problem.ElementsCIn() : 0;
  arena.c_elements = problem.ElementsC();
  // B read where it is resident, or once for a stacked launch (the items share it).
  arena.resident_b = SharedResidentB(launch);
  const int64_t b_region = arena.resident_b != nullptr ? 0
                           : launch.stacked ? Span(layout.b_offset, layout.b_bytes, 0)
                                            : layout.b_bytes;
  arena.a_at = 0;
  arena.b_at = AlignUp(arena.a_at + layout.a_bytes);
  arena.c_in_at = AlignUp(arena.b_at + b_region);
  // +16 bytes after each conversion target: the conversion writes whole 16-byte groups.
  arena.c_at = AlignUp(arena.c_in_at + layout.c_in_bytes);
  int64_t end = AlignUp(arena.c_at + layout.c_bytes + 16);
  arena.c_in32_at = arena.c_in_at;
  arena.c32_at = arena.c_at;
  if (arena.converts) {
    arena.c_in32_at = end;
    end = AlignUp(arena.c_in32_at + arena.c_in_elements * 4 + 16);
    arena.c32_at = end;
    end = AlignUp(arena.c32_at + arena.c_elements * 4);
  }
  arena.copies.workspace_at = end;

  const std::vector<LaunchItem>& items = launch.items;
  std::vector<ArenaCopyIn>& in = arena.copies.in;
  for (size_t j = 0; j < items.size(); ++j) {
    AddIn(ResidentOf(items[j]).a, items[j].host.a, items[j].pieces ? &items[j].pieces->a : nullptr,
          arena.a_at + layout.a_offset[j], Span(layout.a_offset, layout.a_bytes, j), &in);
  }
  if (arena.resident_b == nullptr) {
    for (size_t j = 0; j < (launch.stacked ? 1 : items.size()); ++j) {
      AddIn(ResidentOf(items[j]).b, items[j].host.b,
            items[j].pieces ? &items[j].pieces->b : nullptr, arena.b_at + layout.b_offset[j],
            Span(layout.b_offset, layout.b_bytes, j), &in);
    }
  }
  if (arena.reads_c_in) {
    for (size_t j = 0; j < items.size(); ++j) {
      AddIn(ResidentOf(items[j]).c_in, items[j].host.c_in,
            items[j].pieces ? &items[j].pieces->c_in : nullptr,
            arena.c_in_at + layout.c_in_offset[j], Span(layout.c_in_offset, layout.c_in_bytes, j),
            &in);
    }
  }
  // The C region is contiguous across items, so it leaves in as few DMAs as the slots
  // allow and is scattered to each item's own buffer on the host (or, for a result kept
  // resident, copied on the device).
  for (size_t j = 0; j < items.size(); ++j) {
    const int64_t at = arena.c_at + layout.c_offset[j];
    const int64_t bytes = Span(layout.c_offset, layout.c_bytes, j);
    void* kept = ResidentOf(items[j]).c_out;
    arena.copies.out.push_back(kept != nullptr ? ArenaCopyOut{at, kept, bytes, true}
                                               : ArenaCopyOut{at, items[j].host.c_out, bytes});
  }
  return arena;
}

absl::StatusOr<QuantizedArena> PlanQuantizedArena(const DeviceLaunch& launch,
                                                  std::string_view kernel_name,
                                                  bool reads_packed_a) {
  const std::vector<LaunchItem>& items = launch.items;
  const bool stacked = launch.stacked_quantized != nullptr;
  if (items.empty() || (!stacked && items.size() != 1) || items.front().quantized == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", std::string(kernel_name),
        " runs one QuantizedMatmul at a time, or a stack of them against one weight"));
  }
  for (const LaunchItem& item : items) {
    if (item.quantized == nullptr) {
      return absl::InvalidArgumentError("a stacked quantized launch item without operands");
    }
    if (item.host.c_out == nullptr && ResidentOf(item).c_out == nullptr) {
      return absl::InvalidArgumentError("quantized launch without a result buffer");
    }
  }
  QuantizedArena arena;
  const QuantizedOperands& q = stacked ? *launch.stacked_quantized : *items.front().quantized;
  arena.operands = &q;
  // A as the kernel reads it: packed codes and scales, or dense rows (a quantized A is
  // dequantized at admission for such a kernel). A stack's A is dense: the items' rows.
  if (reads_packed_a != q.a.has_value() || (stacked && reads_packed_a)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", std::string(kernel_name),
        reads_packed_a ? " reads a quantized A" : " reads a dense A"));
  }
  // Resident operands are read where they are (cudaMalloc'd, so aligned as the kernels
  // need); a stack's A and C are the items' own, so they are staged.
  const DeviceOperands& first = ResidentOf(items.front());
  if (first.b != nullptr) {
    arena.resident_b = first.b;
    arena.resident_b_scales = first.b_scales;
  }
  if (!stacked && first.a != nullptr) {
    arena.resident_a = first.a;
    arena.resident_a_scales = first.a_scales;
  }
  if (!stacked) arena.resident_c = first.c_out;
  int64_t a_bytes = 0;
  for (const LaunchItem& item : items) {
    const QuantizedOperands& mine = *item.quantized;
    a_bytes += static_cast<int64_t>(reads_packed_a ? mine.a->data.size() : mine.a_dense.size());
  }
  const absl::string_view a_scales = reads_packed_a ? q.a->scales : absl::string_view();
  const bool a_staged = arena.resident_a == nullptr;
  const bool b_staged = arena.resident_b == nullptr;
  arena.a_at = 0;
  arena.a_scales_at = AlignUp(arena.a_at + (a_staged ? a_bytes : 0));
  arena.b_at = AlignUp(arena.a_scales_at + (a_staged ? static_cast<int64_t>(a_scales.size()) : 0));
  arena.b_scales_at =
      AlignUp(arena.b_at + (b_staged ? static_cast<int64_t>(q.b.data.size()) : 0));
  arena.c_at = AlignUp(arena.b_scales_at + (b_staged ? static_cast<int64_t>(q.b.scales.size()) : 0));
  const int64_t c_bytes = q.m * q.n * static_cast<int64_t>(sizeof(float));
  arena.copies.workspace_at = AlignUp(arena.c_at + (arena.resident_c != nullptr ? 0 : c_bytes));

  std::vector<ArenaCopyIn>& in = arena.copies.in;
  if (a_staged) {
    int64_t at = arena.a_at;
    for (const LaunchItem& item : items) {
      const QuantizedOperands& mine = *item.quantized;
      const absl::string_view rows = reads_packed_a ? mine.a->data : mine.a_dense;
      in.push_back({rows.data(), at, static_cast<int64_t>(rows.size())});
      at += static_cast<int64_t>(rows.size());
    }
    if (reads_packed_a) {
      in.push_back({a_scales.data(), arena.a_scales_at, static_cast<int64_t>(a_scales.size())});
    }
  }
  if (b_staged) {
    in.push_back({q.b.data.data(), arena.b_at, static_cast<int64_t>(q.b.data.size())});
    in.push_back({q.b.scales.data(), arena.b_scales_at, static_cast<int64_t>(q.b.scales.size())});
  }
  // Each item's rows of C, in order (one item: all of C), unless C is written in place.
  if (arena.resident_c == nullptr) {
    int64_t offset = 0;
    for (const LaunchItem& item : items) {
      const int64_t bytes = item.quantized->m * q.n * static_cast<int64_t>(sizeof(float));
      void* kept = ResidentOf(item).c_out;
      arena.copies.out.push_back(kept != nullptr
                                     ? ArenaCopyOut{arena.c_at + offset, kept, bytes, true}
                                     : ArenaCopyOut{arena.c_at + offset, item.host.c_out, bytes});
      offset += bytes;
    }
  }
  return arena;
}

}  // namespace gemmd
