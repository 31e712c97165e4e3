#include "server/rpc/client_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gemmd {

std::string ClientText(absl::string_view text) {
  if (text.size() <= kMaxClientTextBytes) return std::string(text);
  size_t cut = kMaxClientTextBytes;
  // Back off continuation bytes (10xxxxxx) so a multi-byte character is not split.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(text.substr(0, cut), "... (", text.size(), " bytes)");
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  if (shape.size() <= kMaxShownDims) return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
  return absl::StrCat("[", absl::StrJoin(shape.subspan(0, kMaxShownDims), ","), ",... (",
                      shape.size(), " dims)]");
}

}  // namespace gemmd
