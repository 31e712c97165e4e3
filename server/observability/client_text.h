// Client-supplied strings (a kernel name, say) as they may appear in status messages and
// logs: at most kMaxClientTextBytes of them, then "..." and the full length. A client
// that sends a megabyte of name must not get a megabyte of error back (gRPC clients
// refuse status metadata that large) or write one into the log per request.
#ifndef GEMMD_SERVER_OBSERVABILITY_CLIENT_TEXT_H_
#define GEMMD_SERVER_OBSERVABILITY_CLIENT_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gemmd {

inline constexpr size_t kMaxClientTextBytes = 200;

// `text` when it is short enough, else its first bytes (cut at a UTF-8 character
// boundary) + "... (N bytes)"; in both, control characters, bytes that are not UTF-8 and
// the backslash escaped (\n, \xHH, \\), so a client's string can neither break a log
// line nor make a status message a client cannot decode.
std::string ClientText(absl::string_view text);

// A client's tensor shape as "[d0,d1,...]": at most kMaxShownDims dimensions, then
// ",... (N dims)".
inline constexpr size_t kMaxShownDims = 8;
std::string ShapeText(absl::Span<const int64_t> shape);

}  // namespace gemmd

#endif  // GEMMD_SERVER_OBSERVABILITY_CLIENT_TEXT_H_
