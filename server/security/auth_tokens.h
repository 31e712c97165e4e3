// Tenants and their bearer tokens (--auth_tokens_file): one `tenant:token` per line,
// `#` comment lines and blank lines ignored. A tenant may have several tokens (rotation:
// add the new one, reload, move the callers, remove the old one, reload); a token names
// one tenant. Tokens are kept only as SHA-256 digests and compared in constant time; they
// never appear in logs or messages.
#ifndef GEMMD_SERVER_SECURITY_AUTH_TOKENS_H_
#define GEMMD_SERVER_SECURITY_AUTH_TOKENS_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace gemmd {

// Shortest token accepted: 16 characters (e.g. `openssl rand -hex 16` gives 32).
inline constexpr size_t kMinTokenLength = 16;
// Tenant names: 1-64 of [A-Za-z0-9._-]; they become a metrics label and log values.
inline constexpr size_t kMaxTenantLength = 64;

class TokenTable {
 public:
  // INVALID_ARGUMENT "line N: ..." for a malformed line, a bad tenant name, a short token
  // or one given twice. `source` names the file in messages.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text, absl::string_view source);

  // The tenant `token` belongs to, or nullptr. Takes the same time whichever entry
  // matches, or none: every digest is compared in full.
  const std::string* Find(absl::string_view token) const;
  // The tenants, each once, in file order.
  std::vector<std::string> tenants() const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string tenant;
    std::array<unsigned char, 32> digest;
  };
  std::vector<Entry> entries_;
};

// The tokens file in use, reloaded on demand (SIGHUP). Thread-safe.
class TokenAuthenticator {
 public:
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(std::string path);

  // Reads the file again; on any error the tokens in use stay and the error is returned.
  absl::Status Reload();
  // The tenant of an `authorization` header value "Bearer TOKEN"; UNAUTHENTICATED
  // (without the token) otherwise. `present` false: the call carried no such header.
  absl::StatusOr<std::string> Authenticate(bool present, absl::string_view authorization) const;
  std::vector<std::string> tenants() const;
  const std::string& path() const { return path_; }

 private:
  explicit TokenAuthenticator(std::string path) : path_(std::move(path)) {}
  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const TokenTable> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SECURITY_AUTH_TOKENS_H_
