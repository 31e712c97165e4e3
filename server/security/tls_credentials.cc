#include "server/security/tls_credentials.h"

#include <fcntl.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/observability/log.h"
#include "server/observability/thread_name.h"
#include "server/security/pem_files.h"

namespace gemmd {
namespace {

// gRPC's own look at the staged copies: cheap (three small files), and it bounds how
// long a rotation this server accepted waits to be served.
constexpr unsigned int kGrpcRefreshSeconds = 1;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Writes `contents` to a new file `path` (mode 0600: one holds the private key) and sets
// its modification time to `mtime_s`.
absl::Status WriteStaged(const std::string& path, const std::string& contents, time_t mtime_s) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(absl::StrCat("creating ", path));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return Errno(absl::StrCat("writing ", path));
    }
    done += static_cast<size_t>(n);
  }
  const timespec times[2] = {{mtime_s, 0}, {mtime_s, 0}};
  const bool timed = futimens(fd, times) == 0;
  close(fd);
  return timed ? absl::OkStatus() : Errno(absl::StrCat("setting the time of ", path));
}

void RemoveGeneration(const std::string& dir, int generation) {
  const std::string gen = absl::StrCat(dir, "/gen-", generation);
  for (const char* name : {"/key.pem", "/cert.pem", "/ca.pem"}) {
    unlink(absl::StrCat(gen, name).c_str());
  }
  rmdir(gen.c_str());
}

void LogExpiry(const std::string& cert_file, const std::string& cert_pem) {
  absl::StatusOr<absl::Time> not_after = CertificateNotAfter(cert_pem);
  if (!not_after.ok()) return;
  const absl::Duration left = *not_after - absl::Now();
  const std::string when = absl::FormatTime(absl::RFC3339_sec, *not_after, absl::UTCTimeZone());
  if (left <= absl::ZeroDuration()) {
    Log(LogLevel::kError, "tls_certificate_expired",
        {{"file", cert_file},
         {"not_after", when},
         {"effect", "clients that check it refuse this server; replace the file"}});
  } else if (left < kExpiryWarning) {
    Log(LogLevel::kWarning, "tls_certificate_expires_soon",
        {{"file", cert_file},
         {"not_after", when},
         {"days_left", absl::StrCat(absl::ToInt64Hours(left) / 24)}});
  }
}

}  // namespace

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

absl::StatusOr<ServerTls::Set> ServerTls::ReadAndCheck() const {
  // The same checks as at start, on what the files hold now.
  if (absl::Status s = CheckServerTlsFiles(files_); !s.ok()) return s;
  Set set;
  absl::StatusOr<std::string> cert = ReadPemFile("--tls_cert_file", files_.cert_file);
  absl::StatusOr<std::string> key = ReadPemFile("--tls_key_file", files_.key_file);
  if (!cert.ok()) return cert.status();
  if (!key.ok()) return key.status();
  // Read again after the check: a file replaced in between must match too.
  if (absl::Status s = CheckKeyMatches("--tls_key_file", files_.key_file, *key, *cert); !s.ok()) {
    return s;
  }
  set.cert = *std::move(cert);
  set.key = *std::move(key);
  if (!files_.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile("--tls_client_ca_file", files_.client_ca_file);
    if (!ca.ok()) return ca.status();
    if (absl::Status s = CheckCertificates("--tls_client_ca_file", files_.client_ca_file, *ca);
        !s.ok()) {
      return s;
    }
    set.ca = *std::move(ca);
  }
  return set;
}

absl::Status ServerTls::Stage(const Set& set) {
  const int generation = generation_ + 1;
  const std::string gen = absl::StrCat(dir_, "/gen-", generation);
  if (mkdir(gen.c_str(), 0700) != 0) return Errno(absl::StrCat("creating ", gen));
  // Every generation's files have their own time, so gRPC notices a generation that
  // changes while it reads.
  const time_t mtime = static_cast<time_t>(1000000000 + generation);
  absl::Status s = WriteStaged(gen + "/key.pem", set.key, mtime);
  if (s.ok()) s = WriteStaged(gen + "/cert.pem", set.cert, mtime);
  if (s.ok() && !set.ca.empty()) s = WriteStaged(gen + "/ca.pem", set.ca, mtime);
  const std::string next = dir_ + "/current.next";
  unlink(next.c_str());
  if (s.ok() && symlink(absl::StrCat("gen-", generation).c_str(), next.c_str()) != 0) {
    s = Errno(absl::StrCat("linking ", next));
  }
  if (s.ok() && rename(next.c_str(), (dir_ + "/current").c_str()) != 0) {
    s = Errno(absl::StrCat("publishing ", gen));
  }
  if (!s.ok()) {
    RemoveGeneration(dir_, generation);
    return s;
  }
  generation_ = generation;
  served_ = set;
  // The one before stays: gRPC may be reading it right now.
  if (generation >= 3) RemoveGeneration(dir_, generation - 2);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServerTls>> ServerTls::Start(const ServerTlsFiles& files) {
  std::unique_ptr<ServerTls> tls(new ServerTls(files));
  absl::StatusOr<Set> set = tls->ReadAndCheck();
  if (!set.ok()) return set.status();
  LogExpiry(files.cert_file, set->cert);
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/gemmd-tls-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("TLS: cannot make a private directory for the certificates gRPC serves (",
                     pattern, "): ", std::strerror(errno), "; set TMPDIR to a writable directory"));
  }
  tls->dir_ = pattern;
  {
    absl::MutexLock lock(&tls->mu_);
    if (absl::Status s = tls->Stage(*set); !s.ok()) return s;
  }
  const std::string current = tls->dir_ + "/current";
  auto provider = files.client_ca_file.empty()
                      ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                            current + "/key.pem", current + "/cert.pem", kGrpcRefreshSeconds)
                      : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                            current + "/key.pem", current + "/cert.pem", current + "/ca.pem",
                            kGrpcRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  tls->credentials_ = grpc::experimental::TlsServerCredentials(options);
  ServerTls* watched = tls.get();
  tls->watcher_ = std::thread([watched] {
    NameThisThread("gemmd-tls");
    watched->Watch();
  });
  return tls;
}

ServerTls::~ServerTls() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  if (dir_.empty()) return;
  absl::MutexLock lock(&mu_);
  for (int g = std::max(1, generation_ - 1); g <= generation_; ++g) RemoveGeneration(dir_, g);
  unlink((dir_ + "/current").c_str());
  rmdir(dir_.c_str());
}

ServerTls::Outcome ServerTls::CheckFiles() {
  absl::StatusOr<Set> set = ReadAndCheck();
  absl::MutexLock lock(&mu_);
  if (!set.ok()) {
    // Logged once per reason: the refusal repeats every refresh until the files change.
    if (refused_ == set.status().message()) return Outcome::kRefused;
    refused_ = std::string(set.status().message());
    Log(LogLevel::kError, "tls_rotation_refused",
        {{"message", std::string(set.status().message())},
         {"kept", "the certificate in use serves on until the files check out"}});
    return Outcome::kRefused;
  }
  refused_.clear();
  if (*set == served_) return Outcome::kUnchanged;
  if (absl::Status s = Stage(*set); !s.ok()) {
    Log(LogLevel::kError, "tls_rotation_failed",
        {{"message", std::string(s.message())}, {"kept", "the certificate in use"}});
    return Outcome::kRefused;
  }
  Log(LogLevel::kInfo, "tls_rotated",
      {{"cert_file", files_.cert_file}, {"generation", absl::StrCat(generation_)}});
  LogExpiry(files_.cert_file, set->cert);
  return Outcome::kRotated;
}

void ServerTls::Watch() {
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), files_.refresh)) return;
    }
    CheckFiles();
  }
}

}  // namespace gemmd
