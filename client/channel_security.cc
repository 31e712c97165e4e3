#include "client/channel_security.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/support/interceptor.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

absl::StatusOr<std::string> ReadSmallFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (contents.str().size() > (size_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": larger than 1 MiB"));
  }
  return contents.str();
}

// A cheap check that the file is what the flag says: gRPC's own error for a wrong file
// comes only at the first connection, as a handshake failure.
absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path,
                                    const char* expected, const char* what) {
  absl::StatusOr<std::string> pem = ReadSmallFile(flag, path);
  if (!pem.ok()) return pem;
  if (!absl::StrContains(*pem, "-----BEGIN ") || !absl::StrContains(*pem, expected)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": no PEM ", what, " in it"));
  }
  return pem;
}

// Adds the token to every call's initial metadata.
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token) : header_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(&header_);
  }

 private:
  const std::string header_;  // outlives the interceptors: the channel owns the factory
};

}  // namespace

absl::StatusOr<ChannelSecurity> LoadChannelSecurity(const ChannelSecurityFiles& files) {
  ChannelSecurity s;
  s.tls = files.tls || !files.ca_file.empty() || !files.cert_file.empty() ||
          !files.key_file.empty() || !files.server_name.empty();
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together (the client certificate and its key)");
  }
  if (!files.ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPem("--tls_ca_file", files.ca_file, "CERTIFICATE-----", "certificate");
    if (!ca.ok()) return ca.status();
    s.ca_pem = *std::move(ca);
  }
  if (!files.cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPem("--tls_cert_file", files.cert_file, "CERTIFICATE-----", "certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPem("--tls_key_file", files.key_file, "PRIVATE KEY-----", "private key");
    if (!key.ok()) return key.status();
    s.cert_pem = *std::move(cert);
    s.key_pem = *std::move(key);
  }
  s.server_name = files.server_name;
  s.token = files.token;
  if (!files.token_file.empty()) {
    absl::StatusOr<std::string> text = ReadSmallFile("--token_file", files.token_file);
    if (!text.ok()) return text.status();
    std::string first_line(text->substr(0, text->find('\n')));
    s.token = std::string(absl::StripAsciiWhitespace(first_line));
    if (s.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file ", files.token_file, ": its first line is empty"));
    }
  }
  for (char c : s.token) {
    // A header value: printable ASCII, no spaces (they would split "Bearer TOKEN").
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          "the token has a space or a character outside printable ASCII");
    }
  }
  return s;
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ChannelSecurity& security) {
  if (!security.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.ca_pem;  // empty: gRPC's default roots
  options.pem_private_key = security.key_pem;
  options.pem_cert_chain = security.cert_pem;
  return grpc::SslCredentials(options);
}

void SetSecurityArguments(const ChannelSecurity& security, grpc::ChannelArguments* args) {
  if (security.tls && !security.server_name.empty()) {
    args->SetSslTargetNameOverride(security.server_name);
  }
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
TokenInterceptors(const ChannelSecurity& security) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> v;
  if (!security.token.empty()) v.push_back(std::make_unique<TokenInterceptorFactory>(security.token));
  return v;
}

}  // namespace gemmd
