// The server's TLS: its certificate and key, and for mutual TLS the CA that must have
// signed every client's certificate. The files are checked at start (they parse, the key
// is the certificate's), then watched: gRPC re-reads them every `refresh` and serves a
// changed certificate to the connections that follow, with no restart. A replacement that
// does not parse or match is ignored by gRPC (the previous one stays in use), so rotate
// by writing new files and renaming them into place.
#ifndef GEMMD_SERVER_SECURITY_TLS_CREDENTIALS_H_
#define GEMMD_SERVER_SECURITY_TLS_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gemmd {

struct ServerTlsFiles {
  std::string cert_file;       // PEM: the server's certificate (chain)
  std::string key_file;        // PEM: its private key
  std::string client_ca_file;  // PEM: CA(s) for client certificates; empty = no mTLS
  absl::Duration refresh = absl::Seconds(60);

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// INVALID_ARGUMENT naming the flag when a file is missing, unreadable, not PEM of the
// right kind, or the key does not belong to the certificate; also when a client CA is
// given without a server certificate.
absl::Status CheckServerTlsFiles(const ServerTlsFiles& files);

// Checks the files, then the credentials that watch them. With a client CA, a client
// must present a certificate it signed, or the handshake fails.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const ServerTlsFiles& files);

}  // namespace gemmd

#endif  // GEMMD_SERVER_SECURITY_TLS_CREDENTIALS_H_
