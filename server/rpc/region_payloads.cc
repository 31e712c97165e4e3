#include "server/rpc/region_payloads.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

class Resolver {
 public:
  Resolver(const RegionTable* table, const std::string& tenant, RegionPayloads* out)
      : table_(table), tenant_(tenant), out_(out) {}

  // `slice` (when set) as the bytes of payload `field`.
  absl::Status Payload(const std::string& field, bool set, const gemm::v1::RegionSlice& slice,
                       wire::ByteRuns* runs) {
    if (!set) return absl::OkStatus();
    if (!runs->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is sent inline and in a region; send it one way"));
    }
    absl::StatusOr<char*> at = Resolve(field, slice);
    if (!at.ok()) return at.status();
    *runs = wire::ByteRuns(absl::string_view(*at, static_cast<size_t>(slice.bytes())));
    out_->in_region.push_back(runs);
    out_->input_bytes += slice.bytes();
    inputs_.push_back({field, *at, slice.bytes()});
    return absl::OkStatus();
  }

  absl::Status Result(const gemm::v1::RegionSlice& slice, bool keeps_c) {
    if (keeps_c) {
      return absl::InvalidArgumentError(
          "keep_c and c_shm are both set: C stays on the server or goes to the region, not both");
    }
    absl::StatusOr<char*> at = Resolve("c_shm", slice);
    if (!at.ok()) return at.status();
    for (const Input& in : inputs_) {
      const bool same = in.field == "c" && in.at == *at && in.bytes == slice.bytes();
      const bool overlaps = *at < in.at + in.bytes && in.at < *at + slice.bytes();
      if (overlaps && !same) {
        return absl::InvalidArgumentError(absl::StrCat(
            "c_shm overlaps ", in.field,
            "'s slice: C would overwrite an operand the kernel reads (C's own slice may be "
            "c_shm exactly)"));
      }
    }
    out_->c_out = *at;
    out_->c_out_bytes = slice.bytes();
    return absl::OkStatus();
  }

 private:
  struct Input {
    std::string field;
    const char* at;
    int64_t bytes;
  };

  absl::StatusOr<char*> Resolve(const std::string& field, const gemm::v1::RegionSlice& slice) {
    if (table_ == nullptr || !table_->enabled()) return RegionsOff();
    absl::StatusOr<std::shared_ptr<SharedRegion>> region = table_->Find(tenant_, slice.region());
    if (!region.ok()) {
      return absl::Status(region.status().code(),
                          absl::StrCat(field, ": ", region.status().message()));
    }
    absl::StatusOr<char*> at = (*region)->Slice(field, slice.offset(), slice.bytes());
    if (!at.ok()) return at.status();
    if (std::find(out_->regions.begin(), out_->regions.end(), *region) == out_->regions.end()) {
      out_->regions.push_back(*std::move(region));
    }
    return at;
  }

  const RegionTable* const table_;
  const std::string& tenant_;
  RegionPayloads* const out_;
  std::vector<Input> inputs_;
};

}  // namespace

bool RegionPayloads::InRegion(const wire::ByteRuns* runs) const {
  return std::find(in_region.begin(), in_region.end(), runs) != in_region.end();
}

absl::StatusOr<RegionPayloads> LocateMatmulRegions(const RegionTable* table,
                                                   const std::string& tenant,
                                                   wire::MatmulRequestWire* located) {
  RegionPayloads out;
  Resolver resolve(table, tenant, &out);
  const gemm::v1::MatmulRequest& h = located->head;
  if (absl::Status s = resolve.Payload("a", h.a().has_shm(), h.a().shm(), &located->a_data);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = resolve.Payload("b", h.b().has_shm(), h.b().shm(), &located->b_data);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = resolve.Payload("c", h.c().has_shm(), h.c().shm(), &located->c_data);
      !s.ok()) {
    return s;
  }
  if (h.has_c_shm()) {
    if (absl::Status s = resolve.Result(h.c_shm(), h.has_keep_c()); !s.ok()) return s;
  }
  return out;
}

absl::StatusOr<RegionPayloads> LocateQuantizedRegions(const RegionTable* table,
                                                      const std::string& tenant,
                                                      wire::QuantizedMatmulRequestWire* located) {
  RegionPayloads out;
  Resolver resolve(table, tenant, &out);
  const gemm::v1::QuantizedMatmulRequest& h = located->head;
  const struct {
    const char* field;
    bool set;
    const gemm::v1::RegionSlice& slice;
    wire::ByteRuns* runs;
  } payloads[] = {
      {"a.data", h.a().has_data_shm(), h.a().data_shm(), &located->a_data},
      {"a.scales", h.a().has_scales_shm(), h.a().scales_shm(), &located->a_scales},
      {"a_dense", h.a_dense().has_shm(), h.a_dense().shm(), &located->a_dense_data},
      {"b.data", h.b().has_data_shm(), h.b().data_shm(), &located->b_data},
      {"b.scales", h.b().has_scales_shm(), h.b().scales_shm(), &located->b_scales},
  };
  for (const auto& p : payloads) {
    if (absl::Status s = resolve.Payload(p.field, p.set, p.slice, p.runs); !s.ok()) return s;
  }
  if (h.has_c_shm()) {
    if (absl::Status s = resolve.Result(h.c_shm(), h.has_keep_c()); !s.ok()) return s;
  }
  return out;
}

absl::Status CheckResultSlice(const RegionPayloads& regions, int64_t c_bytes) {
  if (regions.c_out == nullptr || regions.c_out_bytes == c_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("c_shm holds ", regions.c_out_bytes,
                                                 " bytes; C is ", c_bytes));
}

absl::Status CheckRegionsIntact(const std::vector<std::shared_ptr<SharedRegion>>& regions) {
  for (const std::shared_ptr<SharedRegion>& region : regions) {
    if (absl::Status s = region->CheckIntact(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gemmd
