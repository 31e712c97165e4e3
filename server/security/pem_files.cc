#include "server/security/pem_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's reason for the last failure, and its error queue emptied (it is per thread
// and would otherwise surface in an unrelated later call).
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  std::string reason = code != 0 ? ERR_reason_error_string(code) != nullptr
                                       ? ERR_reason_error_string(code)
                                       : absl::StrCat("OpenSSL error ", code)
                                 : "no PEM data";
  ERR_clear_error();
  return reason;
}

// Encrypted keys are refused instead of asked for: OpenSSL's default would prompt on the
// terminal, and a server has none.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::Status Invalid(const std::string& flag, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", why));
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Invalid(flag, path, std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return Invalid(flag, path, "read failed");
  // PEM files are small; a huge one is a wrong path (a device, a data file).
  if (contents.str().size() > (size_t{1} << 20)) return Invalid(flag, path, "larger than 1 MiB");
  return contents.str();
}

absl::Status CheckCertificates(const std::string& flag, const std::string& path,
                               const std::string& pem) {
  Bio bio = MemoryBio(pem);
  int count = 0;
  while (true) {
    std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    ++count;
  }
  // The loop ends at the end of the data (PEM_R_NO_START_LINE) or at a block that fails.
  const unsigned long last = ERR_peek_last_error();
  const bool clean_end = ERR_GET_LIB(last) == ERR_LIB_PEM &&
                         ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  if (count == 0) {
    ERR_clear_error();
    return Invalid(flag, path, "no PEM certificate (-----BEGIN CERTIFICATE-----) in it");
  }
  if (last != 0 && !clean_end) {
    return Invalid(flag, path,
                   absl::StrCat("certificate ", count + 1, " does not parse: ", OpenSslReason()));
  }
  ERR_clear_error();
  return absl::OkStatus();
}

absl::Status CheckKeyMatches(const std::string& key_flag, const std::string& key_path,
                             const std::string& key_pem, const std::string& cert_pem) {
  Bio key_bio = MemoryBio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return Invalid(key_flag, key_path,
                   absl::StrCat("not an unencrypted PEM private key (", OpenSslReason(), ")"));
  }
  Bio cert_bio = MemoryBio(cert_pem);
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    ERR_clear_error();
    return Invalid(key_flag, key_path, "no certificate to check the key against");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Invalid(key_flag, key_path, "the key does not belong to the certificate");
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Time> CertificateNotAfter(const std::string& cert_pem) {
  Bio bio = MemoryBio(cert_pem);
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no certificate: ", OpenSslReason()));
  }
  // The difference from now, which OpenSSL computes from the ASN.1 time exactly.
  int days = 0, seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert.get())) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate's notAfter does not parse: ", OpenSslReason()));
  }
  return absl::Now() + absl::Hours(24) * days + absl::Seconds(seconds);
}

}  // namespace gemmd
