#include "server/store/canonical_read.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/quant_prepack.h"

namespace gemmd {

absl::Status ReadCanonical(const StoredTensor& tensor, bool scales, int64_t offset, int64_t bytes,
                           char* out) {
  const char* const region = scales ? tensor.scales() : tensor.data();
  const QuantFormat format = tensor.spec.format;
  // INT8's row scales are never moved.
  if (tensor.layout == WeightLayout::kCanonical || (scales && format == QuantFormat::kInt8)) {
    return tensor.device->ReadResident(out, region + offset, static_cast<size_t>(bytes));
  }
  const int64_t n = tensor.spec.shape[0], k = tensor.spec.shape[1];
  // Every band but the last is as long as the first: the read starts in band offset / that.
  const SwapAbBand first = SwapAbBandOf(format, n, k, 0);
  std::vector<uint8_t> packed, canonical;
  for (int64_t band = offset / (scales ? first.scales_bytes : first.data_bytes);
       band < SwapAbBands(n) && bytes > 0; ++band) {
    const SwapAbBand b = SwapAbBandOf(format, n, k, band);
    const int64_t begin = scales ? b.scales_begin : b.data_begin;
    const int64_t size = scales ? b.scales_bytes : b.data_bytes;
    packed.resize(static_cast<size_t>(size));
    canonical.resize(static_cast<size_t>(size));
    if (absl::Status s =
            tensor.device->ReadResident(packed.data(), region + begin, static_cast<size_t>(size));
        !s.ok()) {
      return s;
    }
    absl::Status unpacked =
        format == QuantFormat::kInt8
            ? UnpackInt8SwapAbValues(packed.data(), b.rows, k,
                                     reinterpret_cast<int8_t*>(canonical.data()))
        : scales
            ? UnpackNvfp4SwapAbRegions(nullptr, packed.data(), b.rows, k, nullptr, canonical.data())
            : UnpackNvfp4SwapAbRegions(packed.data(), nullptr, b.rows, k, canonical.data(),
                                       nullptr);
    if (!unpacked.ok()) return unpacked;
    const int64_t from = offset - begin, take = std::min(bytes, size - from);
    std::memcpy(out, canonical.data() + from, static_cast<size_t>(take));
    out += take;
    offset += take;
    bytes -= take;
  }
  return absl::OkStatus();
}

}  // namespace gemmd
