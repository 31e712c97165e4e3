#include "server/security/auth_tokens.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gemmd {
namespace {

std::array<unsigned char, 32> Digest(absl::string_view token) {
  std::array<unsigned char, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

bool ValidTenant(absl::string_view t) {
  if (t.empty() || t.size() > kMaxTenantLength) return false;
  for (char c : t) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

bool ValidToken(absl::string_view t) {
  for (char c : t) {
    if (c <= ' ' || c > '~') return false;  // a header value: printable ASCII, no spaces
  }
  return true;
}

}  // namespace

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text, absl::string_view source) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_number, ": ", why));
    };
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return error("expected tenant:token");
    const absl::string_view tenant = absl::StripTrailingAsciiWhitespace(line.substr(0, colon));
    const absl::string_view token = absl::StripLeadingAsciiWhitespace(line.substr(colon + 1));
    if (!ValidTenant(tenant)) {
      return error(absl::StrCat("tenant names are 1-", kMaxTenantLength,
                                " characters of A-Z a-z 0-9 . _ -"));
    }
    if (!ValidToken(token)) {
      return error("a token is printable ASCII without spaces");
    }
    if (token.size() < kMinTokenLength) {
      return error(absl::StrCat("token shorter than ", kMinTokenLength, " characters"));
    }
    Entry entry{std::string(tenant), Digest(token)};
    for (const Entry& e : table.entries_) {
      if (e.digest == entry.digest) {
        return error(absl::StrCat("this token is already given (to tenant ", e.tenant,
                                  "): each token names one tenant"));
      }
    }
    table.entries_.push_back(std::move(entry));
  }
  return table;
}

const std::string* TokenTable::Find(absl::string_view token) const {
  const std::array<unsigned char, 32> digest = Digest(token);
  const std::string* found = nullptr;
  for (const Entry& e : entries_) {
    // No early exit: the time spent does not depend on which entry matched.
    const bool match = CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0;
    if (match) found = &e.tenant;
  }
  return found;
}

std::vector<std::string> TokenTable::tenants() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    bool seen = false;
    for (const std::string& t : out) seen = seen || t == e.tenant;
    if (!seen) out.push_back(e.tenant);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(
    std::string path) {
  std::unique_ptr<TokenAuthenticator> auth(new TokenAuthenticator(std::move(path)));
  if (absl::Status s = auth->Reload(); !s.ok()) return s;
  return auth;
}

absl::Status TokenAuthenticator::Reload() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_tokens_file ", path_, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (size_t{16} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_tokens_file ", path_, ": larger than 16 MiB"));
  }
  absl::StatusOr<TokenTable> table =
      TokenTable::Parse(text.str(), absl::StrCat("--auth_tokens_file ", path_));
  if (!table.ok()) return table.status();
  if (table->size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth_tokens_file ", path_, ": no tenant:token line (every call would be refused)"));
  }
  auto shared = std::make_shared<const TokenTable>(*std::move(table));
  absl::MutexLock lock(&mu_);
  table_ = std::move(shared);
  return absl::OkStatus();
}

absl::StatusOr<std::string> TokenAuthenticator::Authenticate(
    bool present, absl::string_view authorization) const {
  if (!present) {
    return absl::UnauthenticatedError(
        "this server needs a token: send the metadata `authorization: Bearer TOKEN`");
  }
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ")) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not `Bearer TOKEN`");
  }
  std::shared_ptr<const TokenTable> table;
  {
    absl::MutexLock lock(&mu_);
    table = table_;
  }
  const std::string* tenant = table->Find(token);
  if (tenant == nullptr) return absl::UnauthenticatedError("unknown token");
  return *tenant;
}

std::vector<std::string> TokenAuthenticator::tenants() const {
  absl::MutexLock lock(&mu_);
  return table_->tenants();
}

}  // namespace gemmd
