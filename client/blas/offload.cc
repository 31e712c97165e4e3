#include "client/blas/offload.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/blas/local_blas.h"
#include "client/blas/remote_gemm.h"
#include "client/blas/settings.h"
#include "client/blas/shm_staging.h"
#include "client/channel_security.h"
#include "client/connection_pool.h"
#include "client/gemm_client.h"

namespace gemmd::blas {
namespace {

constexpr absl::Duration kConnectTimeout = absl::Seconds(5);

void Log(const std::string& line) { std::fprintf(stderr, "gemmd_blas: %s\n", line.c_str()); }

// The library's state, made at the first call and never destroyed: a program may call
// BLAS from its own static destructors or threads still running at exit, and gRPC's
// objects must not be torn down under them.
class Offloader {
 public:
  Offloader() {
    settings_ = ReadSettings([](const char* name) -> const char* { return std::getenv(name); });
    for (const std::string& problem : settings_.problems) Log(problem);
    local_status_ = ResolveLocalBlas(settings_.fallback_library, &local_);
    if (!local_status_.ok()) Log(std::string(local_status_.message()));
    if (settings_.target.empty()) {
      if (settings_.verbose) Log("GEMMD_TARGET is not set: every call is computed locally");
      return;
    }
    absl::StatusOr<ChannelSecurity> security = LoadChannelSecurity(settings_.security);
    if (!security.ok()) {
      Log(absl::StrCat("the server's security settings are not usable (",
                       security.status().message(), "): every call is computed locally"));
      return;
    }
    const Endpoint endpoint(settings_.target, *std::move(security));
    channel_ = ConnectChannel(endpoint);
    client_ = std::make_unique<GemmClient>(channel_, std::make_shared<ConnectionPool>(endpoint));
    if (settings_.shm == ShmMode::kOn ||
        (settings_.shm == ShmMode::kAuto && IsLocalTarget(settings_.target))) {
      shm_ = std::make_unique<ShmStaging>(channel_);
    }
    if (settings_.verbose) {
      Log(absl::StrFormat("calls of %g flops or more go to %s; local BLAS: %s", settings_.min_flops,
                          settings_.target, local_status_.ok() ? local_.source : "none"));
    }
    std::atexit([] {
      Offloader& o = Get();
      o.LogCounts();
      if (o.shm_ != nullptr && !forked_child_.load()) o.shm_->Release();
    });
    // A child forked after this (Python's multiprocessing does by default) has copies of
    // the client's connections without the threads that serve them: it computes locally.
    pthread_atfork(nullptr, nullptr, [] { forked_child_.store(true); });
  }

  static Offloader& Get() {
    static Offloader* offloader = new Offloader();
    return *offloader;
  }

  void Compute(const GemmCall& call) {
    const absl::Time start = absl::Now();
    const char* where;
    std::string why;
    if (!call.has_product()) {
      where = "local";
      why = " (no product)";
      RunLocalCounted(call, &no_product_);
    } else if (client_ == nullptr || call.flops() < settings_.min_flops) {
      where = "local";
      RunLocalCounted(call, &small_);
    } else if (forked_child_.load(std::memory_order_relaxed)) {
      where = "local";
      why = " (a forked child)";
      if (!fork_logged_.exchange(true)) {
        Log("in a process forked after the first remote call, calls are computed locally");
      }
      RunLocalCounted(call, &fallbacks_);
    } else if (absl::Now() < retry_after()) {
      where = "local";
      why = " (server unreachable; retrying later)";
      RunLocalCounted(call, &fallbacks_);
    } else {
      absl::Status status = Connected();
      if (status.ok()) {
        std::unique_ptr<ShmStaging::Lease> region = StagingFor(call);
        status = RunRemote(*client_, call, settings_.timeout, settings_.stripes, region.get());
        if (region != nullptr) {
          why = " (shared memory)";
          // The server no longer knows the region (it restarted, or it was unregistered
          // from under us): the socket from now on.
          if (absl::IsNotFound(status) || absl::IsFailedPrecondition(status)) {
            ShmUnusable(status);
          }
        }
      }
      if (status.ok()) {
        where = "remote";
        remote_.fetch_add(1, std::memory_order_relaxed);
      } else {
        where = "local";
        why = absl::StrCat(" (fallback: ", absl::StatusCodeToString(status.code()), ")");
        Fallback(call, status);
      }
    }
    if (settings_.verbose) {
      Log(absl::StrFormat("%s %c%c m=%d n=%d k=%d %s %.3f ms%s", RoutineName(call.element),
                          call.transpose_a ? 'T' : 'N', call.transpose_b ? 'T' : 'N', call.m,
                          call.n, call.k, where, absl::ToDoubleMilliseconds(absl::Now() - start),
                          why));
    }
  }

 private:
  absl::Time retry_after() const {
    return absl::FromUnixNanos(retry_after_ns_.load(std::memory_order_relaxed));
  }

  // The shared-memory region for a call that moves kAutoStripeBytes or more to a server on
  // this machine; null for a smaller call, while another call holds it, or once it could
  // not be made or registered (said once; the calls then go over the socket).
  std::unique_ptr<ShmStaging::Lease> StagingFor(const GemmCall& call) {
    if (shm_ == nullptr || shm_failed_.load(std::memory_order_relaxed) ||
        StagedBytes(call) < kAutoStripeBytes) {
      return nullptr;
    }
    absl::StatusOr<std::unique_ptr<ShmStaging::Lease>> lease = shm_->TryAcquire(StagedBytes(call));
    if (lease.ok()) return *std::move(lease);
    ShmUnusable(lease.status());
    return nullptr;
  }

  void ShmUnusable(const absl::Status& status) {
    if (!shm_failed_.exchange(true)) {
      Log(absl::StrCat("no shared-memory region with the server at ", settings_.target, " (",
                       status.ToString(), "); calls go over the socket"));
    }
  }

  // A server that does not take connections (a host that drops them) costs a call
  // kConnectTimeout, not its whole deadline.
  absl::Status Connected() {
    if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
      return absl::OkStatus();
    }
    const absl::Duration wait = std::min(kConnectTimeout, settings_.timeout);
    if (channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + wait))) {
      return absl::OkStatus();
    }
    return absl::UnavailableError(absl::StrCat("no connection to ", settings_.target, " within ",
                                               absl::FormatDuration(wait)));
  }

  void RunLocalCounted(const GemmCall& call, std::atomic<uint64_t>* counter) {
    counter->fetch_add(1, std::memory_order_relaxed);
    if (!local_status_.ok()) return;  // said once, at start; C is left as it was
    RunLocal(local_, call);
  }

  void Fallback(const GemmCall& call, const absl::Status& status) {
    // A server that cannot be reached (or will not let us in) is left alone for a while:
    // every call would otherwise wait for it again. One that refused this call (too big,
    // too busy, no FP64) is tried again with the next.
    const bool unreachable = status.code() == absl::StatusCode::kUnavailable ||
                             status.code() == absl::StatusCode::kDeadlineExceeded ||
                             status.code() == absl::StatusCode::kUnauthenticated ||
                             status.code() == absl::StatusCode::kPermissionDenied;
    if (unreachable) {
      retry_after_ns_.store(absl::ToUnixNanos(absl::Now() + settings_.retry),
                            std::memory_order_relaxed);
    }
    if (!fallback_logged_.exchange(true)) {
      Log(absl::StrCat(RoutineName(call.element), " computed locally: the server at ",
                       settings_.target, " answered ", status.ToString(),
                       unreachable ? absl::StrCat("; calls stay local for ",
                                                  absl::FormatDuration(settings_.retry))
                                   : std::string(),
                       " (said once; the count at exit)"));
    }
    RunLocalCounted(call, &fallbacks_);
  }

  void LogCounts() {
    if (!settings_.verbose && fallbacks_.load() == 0) return;
    Log(absl::StrCat(remote_.load(), " calls remote, ", small_.load(),
                     " local below GEMMD_BLAS_MIN_FLOPS or with no server, ", no_product_.load(),
                     " local with no product, ", fallbacks_.load(),
                     " fallbacks to the local BLAS"));
  }

  Settings settings_;
  LocalBlas local_;
  absl::Status local_status_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<GemmClient> client_;
  std::unique_ptr<ShmStaging> shm_;  // null: calls go over the socket
  std::atomic<bool> shm_failed_{false};
  std::atomic<int64_t> retry_after_ns_{0};
  std::atomic<bool> fallback_logged_{false};
  std::atomic<bool> fork_logged_{false};
  static inline std::atomic<bool> forked_child_{false};
  std::atomic<uint64_t> remote_{0}, small_{0}, no_product_{0}, fallbacks_{0};
};

}  // namespace

void Compute(const GemmCall& call) { Offloader::Get().Compute(call); }

}  // namespace gemmd::blas
