#include "client/blas/settings.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gemmd::blas {
namespace {

std::string Get(const char* (*getenv)(const char*), const char* name) {
  const char* value = getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// A non-negative number of `name`, or `fallback` (with a line in `problems`, naming it
// as `fallback_text` where given) when it is set to anything else; `positive` refuses 0 as
// well.
double Number(const char* (*getenv)(const char*), const char* name, double fallback, bool positive,
              std::vector<std::string>* problems, const char* fallback_text = nullptr) {
  const std::string text = Get(getenv, name);
  if (text.empty()) return fallback;
  double value;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < 0 ||
      (positive && value == 0)) {
    problems->push_back(absl::StrCat(
        name, "='", text, "' is not a ", positive ? "positive" : "non-negative", " number; using ",
        fallback_text != nullptr ? std::string(fallback_text)
                                 : absl::StrFormat("%.15g", fallback)));
    return fallback;
  }
  return value;
}

bool Flag(const char* (*getenv)(const char*), const char* name,
          std::vector<std::string>* problems) {
  const std::string text = Get(getenv, name);
  if (text.empty() || text == "0") return false;
  if (text == "1") return true;
  problems->push_back(absl::StrCat(name, "='", text, "' is neither 0 nor 1; using 0"));
  return false;
}

}  // namespace

bool IsLocalTarget(const std::string& target) {
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) return true;
  std::string host = target;
  if (absl::StartsWith(host, "dns:///")) host = host.substr(7);
  if (absl::StartsWith(host, "ipv4:") || absl::StartsWith(host, "ipv6:")) host = host.substr(5);
  if (absl::StartsWith(host, "[")) {
    host = host.substr(
        1, host.find(']') == std::string::npos ? std::string::npos : host.find(']') - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

Settings ReadSettings(const char* (*getenv)(const char*)) {
  Settings s;
  s.target = Get(getenv, "GEMMD_TARGET");
  s.security.token = Get(getenv, "GEMMD_TOKEN");
  s.security.token_file = Get(getenv, "GEMMD_TOKEN_FILE");
  s.security.tls = Flag(getenv, "GEMMD_TLS", &s.problems);
  s.security.ca_file = Get(getenv, "GEMMD_TLS_CA_FILE");
  s.security.cert_file = Get(getenv, "GEMMD_TLS_CERT_FILE");
  s.security.key_file = Get(getenv, "GEMMD_TLS_KEY_FILE");
  s.security.server_name = Get(getenv, "GEMMD_TLS_SERVER_NAME");
  s.min_flops = Number(getenv, "GEMMD_BLAS_MIN_FLOPS", kDefaultMinFlops, false, &s.problems);
  s.timeout = absl::Seconds(
      Number(getenv, "GEMMD_BLAS_TIMEOUT_S", kDefaultTimeoutSeconds, true, &s.problems));
  s.retry =
      absl::Seconds(Number(getenv, "GEMMD_BLAS_RETRY_S", kDefaultRetrySeconds, false, &s.problems));
  constexpr char kStripesDefault[] = "the default (8 connections from 8 MiB, else 1)";
  const double stripes =
      Number(getenv, "GEMMD_BLAS_STRIPES", kDefaultStripes, false, &s.problems, kStripesDefault);
  if (stripes >= 0 && (stripes != std::floor(stripes) || stripes > kMaxStripes)) {
    s.problems.push_back(absl::StrCat("GEMMD_BLAS_STRIPES='", Get(getenv, "GEMMD_BLAS_STRIPES"),
                                      "' is not a whole number up to ", kMaxStripes, "; using ",
                                      kStripesDefault));
  } else {
    s.stripes = static_cast<int>(stripes);
  }
  const std::string shm = Get(getenv, "GEMMD_BLAS_SHM");
  if (shm == "0") {
    s.shm = ShmMode::kOff;
  } else if (shm == "1") {
    s.shm = ShmMode::kOn;
  } else if (!shm.empty() && shm != "auto") {
    s.problems.push_back(
        absl::StrCat("GEMMD_BLAS_SHM='", shm, "' is none of auto, 0 and 1; using auto"));
  }
  s.fallback_library = Get(getenv, "GEMMD_BLAS_FALLBACK");
  s.verbose = Flag(getenv, "GEMMD_BLAS_VERBOSE", &s.problems);
  return s;
}

}  // namespace gemmd::blas
