// The server's TLS: its certificate and key, and for mutual TLS the CA that must have
// signed every client's certificate. The files are checked at start (they parse, the key
// is the certificate's), then watched every `refresh` for rotation.
//
// Why not let gRPC watch the operator's files: gRPC 1.51 serves whatever it reads, so a
// key moved into place before its certificate (the usual order), or a garbage or
// mismatched file, broke every new connection until fixed. Here a watch thread checks
// the files as at start and only a complete, matching set is handed on: it is copied
// into a private directory as a new generation and published with one atomic rename
// (`current` -> `gen-N`); gRPC watches those copies (every second). Each generation's
// files carry their own modification time, so gRPC's read, which compares the files'
// times before and after, never pairs a key of one generation with a certificate of
// another. A set that does not check out is logged (tls_rotation_refused, once per
// content) and the certificate in use keeps serving. An expired certificate, or one
// within kExpiryWarning of its end, is logged at start and at each rotation.
#ifndef GEMMD_SERVER_SECURITY_TLS_CREDENTIALS_H_
#define GEMMD_SERVER_SECURITY_TLS_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gemmd {

struct ServerTlsFiles {
  std::string cert_file;       // PEM: the server's certificate (chain)
  std::string key_file;        // PEM: its private key
  std::string client_ca_file;  // PEM: CA(s) for client certificates; empty = no mTLS
  absl::Duration refresh = absl::Seconds(60);

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// A certificate this close to its end is warned about (tls_certificate_expires_soon).
inline constexpr absl::Duration kExpiryWarning = absl::Hours(24 * 14);

// INVALID_ARGUMENT naming the flag when a file is missing, unreadable, not PEM of the
// right kind, or the key does not belong to the certificate; also when a client CA is
// given without a server certificate.
absl::Status CheckServerTlsFiles(const ServerTlsFiles& files);

// The TLS of a running server: its credentials, and the watch that rotates them.
// Thread-safe.
class ServerTls {
 public:
  // Checks the files (CheckServerTlsFiles' errors), stages them (INTERNAL when no private
  // directory can be made under $TMPDIR or /tmp) and starts watching. With a client CA,
  // a client must present a certificate it signed, or the handshake fails.
  static absl::StatusOr<std::unique_ptr<ServerTls>> Start(const ServerTlsFiles& files);
  ~ServerTls();  // stops watching, removes the staged copies

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }

  // One look at the files now (the watch thread's, every refresh).
  enum class Outcome { kUnchanged, kRotated, kRefused };
  Outcome CheckFiles();

 private:
  explicit ServerTls(ServerTlsFiles files) : files_(std::move(files)) {}
  struct Set {
    std::string cert, key, ca;
    bool operator==(const Set& o) const { return cert == o.cert && key == o.key && ca == o.ca; }
  };
  absl::StatusOr<Set> ReadAndCheck() const;
  absl::Status Stage(const Set& set) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watch();

  const ServerTlsFiles files_;
  std::string dir_;  // the private directory gRPC reads
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  absl::Mutex mu_;
  Set served_ ABSL_GUARDED_BY(mu_);
  std::string refused_ ABSL_GUARDED_BY(mu_);  // why the files were last refused (logged once)
  int generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SECURITY_TLS_CREDENTIALS_H_
