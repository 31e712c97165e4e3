#include "server/security/tls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/security/pem_files.h"

namespace gemmd {

absl::Status CheckServerTlsFiles(const ServerTlsFiles& files) {
  if (!files.enabled()) {
    if (!files.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file needs --tls_cert_file and --tls_key_file (mutual TLS is TLS "
          "with client certificates)");
    }
    return absl::OkStatus();
  }
  if (files.cert_file.empty() || files.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
  }
  if (files.refresh < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--tls_refresh_s must be at least 1");
  }
  absl::StatusOr<std::string> cert = ReadPemFile("--tls_cert_file", files.cert_file);
  if (!cert.ok()) return cert.status();
  if (absl::Status s = CheckCertificates("--tls_cert_file", files.cert_file, *cert); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> key = ReadPemFile("--tls_key_file", files.key_file);
  if (!key.ok()) return key.status();
  if (absl::Status s = CheckKeyMatches("--tls_key_file", files.key_file, *key, *cert); !s.ok()) {
    return s;
  }
  if (!files.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile("--tls_client_ca_file", files.client_ca_file);
    if (!ca.ok()) return ca.status();
    return CheckCertificates("--tls_client_ca_file", files.client_ca_file, *ca);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const ServerTlsFiles& files) {
  if (absl::Status s = CheckServerTlsFiles(files); !s.ok()) return s;
  const auto refresh_s = static_cast<unsigned int>(
      std::min<int64_t>(absl::ToInt64Seconds(files.refresh), 86400 * 365));
  auto provider =
      files.client_ca_file.empty()
          ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                files.key_file, files.cert_file, refresh_s)
          : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                files.key_file, files.cert_file, files.client_ca_file, refresh_s);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace gemmd
