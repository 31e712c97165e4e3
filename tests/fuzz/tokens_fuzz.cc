// libFuzzer target: the tokens file parser (server/security/auth_tokens.h), which reads
// what an operator writes and reloads on SIGHUP. Beyond "no crash": an accepted file names
// only valid tenants, and every `tenant:token` line of it that parses on its own finds its
// tenant again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "server/security/auth_tokens.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gemmd::TokenTable> table = gemmd::TokenTable::Parse(text, "fuzz");
  if (!table.ok()) return 0;
  for (const std::string& tenant : table->tenants()) {
    if (tenant.empty() || tenant.size() > gemmd::kMaxTenantLength) std::abort();
  }
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    const absl::string_view tenant = absl::StripTrailingAsciiWhitespace(line.substr(0, colon));
    const absl::string_view token = absl::StripLeadingAsciiWhitespace(line.substr(colon + 1));
    const std::string* found = table->Find(token);
    if (found == nullptr || *found != tenant) std::abort();
  }
  return 0;
}
