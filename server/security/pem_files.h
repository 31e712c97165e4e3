// Reading and checking PEM files with OpenSSL, so a bad certificate, key or CA is refused
// at start with a message naming the flag and the reason, not found later as handshakes
// that fail with no word in the log.
#ifndef GEMMD_SERVER_SECURITY_PEM_FILES_H_
#define GEMMD_SERVER_SECURITY_PEM_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gemmd {

// The file's contents; INVALID_ARGUMENT "<flag> <path>: <reason>" when it cannot be read.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

// OK when `pem` holds at least one certificate, and nothing that fails to parse.
absl::Status CheckCertificates(const std::string& flag, const std::string& path,
                               const std::string& pem);

// OK when `key_pem` is a private key and it belongs to the first certificate of
// `cert_pem`.
absl::Status CheckKeyMatches(const std::string& key_flag, const std::string& key_path,
                             const std::string& key_pem, const std::string& cert_pem);

// When the first certificate of `cert_pem` stops being valid (its notAfter).
absl::StatusOr<absl::Time> CertificateNotAfter(const std::string& cert_pem);

}  // namespace gemmd

#endif  // GEMMD_SERVER_SECURITY_PEM_FILES_H_
