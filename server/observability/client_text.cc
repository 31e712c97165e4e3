#include "server/observability/client_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gemmd {
namespace {

// The length of the well-formed UTF-8 character starting at text[i] (2 to 4), or 0 when
// the bytes there are not one (a stray continuation byte, an overlong form, a surrogate,
// a truncated sequence).
size_t Utf8Length(absl::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = at(i);
  size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) low = 0xA0;
    if (c == 0xED) high = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) low = 0x90;
    if (c == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (at(i + 1) < low || at(i + 1) > high) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  }
  return n;
}

// `text` with what could break a line or a client's UTF-8 decoding escaped: control
// characters as \n, \r, \t or \xHH, bytes that are not UTF-8 as \xHH, and the backslash
// itself, so an escape in the output always means one.
std::string Escaped(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else if (const size_t n = c >= 0x80 ? Utf8Length(text, i) : 0; n > 0) {
      out.append(text.data() + i, n);
      i += n;
      continue;
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
    ++i;
  }
  return out;
}

}  // namespace

std::string ClientText(absl::string_view text) {
  if (text.size() <= kMaxClientTextBytes) return Escaped(text);
  size_t cut = kMaxClientTextBytes;
  // Back off continuation bytes (10xxxxxx) so a multi-byte character is not split.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(Escaped(text.substr(0, cut)), "... (", text.size(), " bytes)");
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  if (shape.size() <= kMaxShownDims) return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
  return absl::StrCat("[", absl::StrJoin(shape.subspan(0, kMaxShownDims), ","), ",... (",
                      shape.size(), " dims)]");
}

}  // namespace gemmd
