// How the client library's channels prove who they talk to and who they are: TLS (the
// server's certificate checked against a CA, or the system's roots), a client certificate
// for servers that require mutual TLS, and a bearer token sent with every call
// (`authorization: Bearer TOKEN`) for servers that authenticate tenants. Files are read
// once, by LoadChannelSecurity, so a bad path is an error there, not a channel that
// never connects.
#ifndef GEMMD_CLIENT_CHANNEL_SECURITY_H_
#define GEMMD_CLIENT_CHANNEL_SECURITY_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gemmd {

// What a user names (gemm-cli's --tls_* and --token_file flags).
struct ChannelSecurityFiles {
  bool tls = false;             // TLS with the system's roots; implied by any file below
  std::string ca_file;          // PEM CA that signed the server's certificate
  std::string cert_file;        // PEM client certificate (mutual TLS), with key_file
  std::string key_file;         // PEM private key of cert_file
  std::string server_name;      // name to expect in the server's certificate (and SNI)
  std::string token_file;       // file whose first line is the bearer token
  std::string token;            // the token itself (token_file wins)
};

// The loaded settings: PEM contents and the token, ready for any number of channels.
struct ChannelSecurity {
  bool tls = false;
  std::string ca_pem, cert_pem, key_pem;
  std::string server_name;
  std::string token;
};

// INVALID_ARGUMENT naming the flag when a file cannot be read, is not PEM of the right
// kind, or a certificate comes without its key (or the other way round).
absl::StatusOr<ChannelSecurity> LoadChannelSecurity(const ChannelSecurityFiles& files);

// The channel credentials for `security` (insecure when it has no TLS), the channel
// arguments it needs (the server name override), and the interceptors that send its
// token (none without one).
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ChannelSecurity& security);
void SetSecurityArguments(const ChannelSecurity& security, grpc::ChannelArguments* args);
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
TokenInterceptors(const ChannelSecurity& security);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CHANNEL_SECURITY_H_
