// What the library does, from the environment of the program it is loaded into (read
// once, at the first GEMM call, never at load time): where the server is and how to reach
// it, which calls go there, how long one may take, and what computes the rest.
//
//   GEMMD_TARGET            the server ("host:port", "unix:PATH", any gRPC target); unset
//                           or empty: every call is computed locally
//   GEMMD_TOKEN, GEMMD_TOKEN_FILE   bearer token (the file's first line; the file wins)
//   GEMMD_TLS=1, GEMMD_TLS_CA_FILE, GEMMD_TLS_CERT_FILE, GEMMD_TLS_KEY_FILE,
//   GEMMD_TLS_SERVER_NAME   TLS as gemm-cli's --tls* flags (any file implies TLS)
//   GEMMD_BLAS_MIN_FLOPS    calls of fewer flops (2*m*n*k) stay local
//   GEMMD_BLAS_TIMEOUT_S    deadline of one remote call (then it is computed locally)
//   GEMMD_BLAS_STRIPES      connections a remote call's bytes go over: unset, 8 for a
//                           call that moves 8 MiB or more and 1 below; 0, the client
//                           library's choice (several from 32 MiB); N, always N
//   GEMMD_BLAS_SHM          auto (the default): a call that moves 8 MiB or more to a
//                           server on this machine ("unix:PATH", localhost, 127.x, [::1])
//                           goes through a shared-memory region instead of the socket;
//                           1: whatever the target; 0: never
//   GEMMD_BLAS_RETRY_S      after the server could not be reached, calls stay local
//                           this long before it is tried again
//   GEMMD_BLAS_FALLBACK     the BLAS library that computes local calls (default: the
//                           next definition of the routine, as the program would have
//                           called it without this library)
//   GEMMD_BLAS_VERBOSE=1    one line per call on stderr, and a summary at exit
#ifndef GEMMD_CLIENT_BLAS_SETTINGS_H_
#define GEMMD_CLIENT_BLAS_SETTINGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/channel_security.h"

namespace gemmd::blas {

// Where remote calls start to beat OpenBLAS on a 16-core host, about 1536^3
// (docs/BENCHMARKS.md, "BLAS offload").
inline constexpr double kDefaultMinFlops = 2.0 * 1536 * 1536 * 1536;
inline constexpr double kDefaultTimeoutSeconds = 60;
inline constexpr double kDefaultRetrySeconds = 10;
// -1: kAutoStripes connections for calls that move kAutoStripeBytes or more, else one.
// One HTTP/2 connection carries a 24 MiB FP64 call at half the speed of eight; the
// client library's own threshold (32 MiB) suits calls whose C is not waited for on a
// host that also computes.
inline constexpr int kDefaultStripes = -1;
inline constexpr int kAutoStripes = 8;
inline constexpr int64_t kAutoStripeBytes = int64_t{8} << 20;
inline constexpr int kMaxStripes = 64;

enum class ShmMode { kAuto, kOff, kOn };

// Whether `target` names a server on this machine (a Unix socket or a loopback address).
bool IsLocalTarget(const std::string& target);

struct Settings {
  std::string target;  // empty: no server
  ChannelSecurityFiles security;
  double min_flops = kDefaultMinFlops;
  absl::Duration timeout = absl::Seconds(kDefaultTimeoutSeconds);
  absl::Duration retry = absl::Seconds(kDefaultRetrySeconds);
  int stripes = kDefaultStripes;  // as CallOptions::stripes, or -1 (above)
  ShmMode shm = ShmMode::kAuto;
  std::string fallback_library;
  bool verbose = false;
  // One line per setting that was not understood (its default is used instead).
  std::vector<std::string> problems;
};

// `getenv` is the environment to read (a parameter so tests need not set the process's).
Settings ReadSettings(const char* (*getenv)(const char*));

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_SETTINGS_H_
