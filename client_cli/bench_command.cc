// Load test of one request. Closed loop: `concurrency` workers each send it back to back
// for warmup_s + duration_s; only calls that start after the warm-up and end inside the
// measured window count. With --local the workers call the in-process CPU backend
// instead (the ceiling the service is measured against). With --async the calls go
// through gRPC's callback API: `concurrency` calls stay in flight without a thread each,
// each completion starting the next call, so the client costs less CPU per request.
// With --stream the requests go on `concurrency` MatmulStreams, each keeping
// --outstanding of them in flight (each answer sending the next).
// Open loop (--rate): calls start at the arrival times of a Poisson or evenly spaced
// process whatever the server does, and each one's latency counts from its intended
// start, so a server that stalls shows its queueing instead of slowing the arrivals
// (coordinated omission); an arrival that finds `concurrency` calls in flight is dropped
// and counted. --server_pid adds the server's CPU time per request over the window.
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "client/matmul_stream.h"
#include "client/tensor_store_client.h"
#include "client_cli/bench_report.h"
#include "client_cli/bench_verify.h"
#include "client_cli/commands.h"
#include "client_cli/matmul_inputs.h"
#include "client_cli/process_cpu.h"
#include "client_cli/quantized_inputs.h"
#include "client_cli/request_args.h"
#include "client_cli/resident_operands.h"
#include "client_cli/shm_operands.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/cpu/cpu_gemm.h"
#include "proto/transport_arguments.h"

namespace gemmd {
namespace {

struct Sample {
  absl::Time start;
  absl::Time end;
  grpc::StatusCode code = grpc::StatusCode::OK;
  int64_t queue_us = 0, copy_in_us = 0, compute_us = 0, copy_out_us = 0, total_us = 0;
  uint32_t batch_size = 0;
  std::optional<StripedSteps> striped;  // a call that went striped: its steps
  std::string message;  // errors only
};

using Worker = std::function<Sample()>;

// Runs `make_worker(i)()` in a loop on `concurrency` threads until `end`.
std::vector<Sample> RunClosedLoop(int concurrency, absl::Time end,
                                  const std::function<Worker(int)>& make_worker) {
  std::vector<std::vector<Sample>> per_thread(static_cast<size_t>(concurrency));
  std::vector<std::thread> threads;
  for (int i = 0; i < concurrency; ++i) {
    threads.emplace_back([&, i] {
      Worker call = make_worker(i);
      while (absl::Now() < end) per_thread[static_cast<size_t>(i)].push_back(call());
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<Sample> all;
  for (auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
  return all;
}

// The server's phase times and batch size of a call that succeeded, and a striped call's
// steps.
void SetServerTimes(const MatmulResult& result, Sample* s) {
  const gemm::v1::Timing& t = result.info().timing();
  s->striped = result.striped_steps();
  s->queue_us = t.queue_us();
  s->copy_in_us = t.copy_in_us();
  s->compute_us = t.compute_us();
  s->copy_out_us = t.copy_out_us();
  s->total_us = t.total_us();
  s->batch_size = t.batch_size();
}

void SetOutcome(const absl::Status& status, Sample* s) {
  s->code = static_cast<grpc::StatusCode>(status.code());
  if (!status.ok()) s->message = std::string(status.message());
}

// Starts one call of the benchmark's RPC (Matmul or QuantizedMatmul, fixed request)
// through the client library; C goes to the caller's buffer in `options`.
using StartCall = std::function<void(GemmClient*, const CallOptions&, MatmulResult*,
                                     std::function<void(absl::Status)>)>;
// Makes one blocking call of it.
using BlockingCall =
    std::function<absl::Status(GemmClient*, const CallOptions&, MatmulResult*)>;

// The clients calls go through, round-robin (one per connection), and the stripes each
// call asks for (CallOptions::stripes).
struct CallClients {
  std::vector<std::shared_ptr<GemmClient>> clients;
  int stripes = 1;
  int64_t stripe_chunk_bytes = 0;  // CallOptions::stripe_chunk_bytes
  int row_blocks = 0;              // CallOptions::row_blocks
  AnswerSampler* sampler = nullptr;  // --verify: keeps a sample of the answers' C
};

// Calls in flight through the client library's callback API, one per slot, each slot
// with its own C buffer. A finished call's sample goes to `finished(slot, sample)`, on a
// gRPC thread; its latency counts from the time Start was given.
class CallSlots {
 public:
  using Finished = std::function<void(size_t slot, Sample sample)>;

  CallSlots(const CallClients& clients, StartCall start, absl::Duration timeout, int slots,
            int64_t out_bytes, Finished finished)
      : start_(std::move(start)),
        timeout_(timeout),
        stripes_(clients.stripes),
        stripe_chunk_bytes_(clients.stripe_chunk_bytes),
        row_blocks_(clients.row_blocks),
        sampler_(clients.sampler),
        finished_(std::move(finished)),
        clients_(clients.clients),
        slots_(static_cast<size_t>(slots)) {
    for (Slot& slot : slots_) slot.out.resize(static_cast<size_t>(out_bytes));
  }

  size_t size() const { return slots_.size(); }

  // Starts slot `i`'s call on connection `n` (round-robin); `from` is when it counts from
  // (now, or an intended send time).
  void Start(size_t i, absl::Time from, size_t n) {
    Slot& slot = slots_[i];
    slot.result = MatmulResult();
    slot.from = from;
    CallOptions options;
    options.timeout = timeout_;
    options.stripes = stripes_;
    options.stripe_chunk_bytes = stripe_chunk_bytes_;
    options.row_blocks = row_blocks_;
    options.c_out = absl::MakeSpan(slot.out);
    start_(clients_[n % clients_.size()].get(), options, &slot.result,
           [this, i](absl::Status status) {
             Slot& done = slots_[i];
             Sample s;
             s.start = done.from;
             s.end = absl::Now();
             SetOutcome(status, &s);
             if (status.ok()) SetServerTimes(done.result, &s);
             if (status.ok() && sampler_ != nullptr) sampler_->Offer(done.result.c());
             finished_(i, std::move(s));
           });
  }

 private:
  struct Slot {
    std::vector<char> out;  // C, the caller's buffer
    MatmulResult result;
    absl::Time from;
  };
  const StartCall start_;
  const absl::Duration timeout_;
  const int stripes_;
  const int64_t stripe_chunk_bytes_;
  const int row_blocks_;
  AnswerSampler* const sampler_;
  const Finished finished_;
  const std::vector<std::shared_ptr<GemmClient>> clients_;
  std::vector<Slot> slots_;
};

// Keeps `slots` calls in flight until `end`; each completion records its sample and
// starts the slot's next call.
class AsyncClosedLoop {
 public:
  AsyncClosedLoop(const CallClients& clients, StartCall start, absl::Duration timeout,
                  int slots, absl::Time end, int64_t out_bytes)
      : end_(end),
        calls_(clients, std::move(start), timeout, slots, out_bytes,
               [this](size_t i, Sample s) { Finished(i, std::move(s)); }) {}

  std::vector<Sample> Run() {
    {
      absl::MutexLock lock(&mu_);
      active_ = static_cast<int>(calls_.size());
    }
    for (size_t i = 0; i < calls_.size(); ++i) calls_.Start(i, absl::Now(), i);
    done_.WaitForNotification();
    absl::MutexLock lock(&mu_);
    return std::move(samples_);
  }

 private:
  void Finished(size_t i, Sample s) {
    {
      absl::MutexLock lock(&mu_);
      samples_.push_back(std::move(s));
    }
    if (absl::Now() < end_) {
      calls_.Start(i, absl::Now(), i);
      return;
    }
    // Notified after the lock is let go: the waiter may destroy this (and mu_) at once.
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      last = --active_ == 0;
    }
    if (last) done_.Notify();
  }

  const absl::Time end_;
  absl::Mutex mu_;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification done_;
  CallSlots calls_;  // last: its callbacks use the members above
};

// Starts calls at the arrival times of a fixed-rate or Poisson process until `end`, on
// at most `slots` calls in flight; see the file comment.
class OpenLoop {
 public:
  OpenLoop(const CallClients& clients, StartCall start, absl::Duration timeout, int slots,
           double rate, bool poisson, uint64_t seed, absl::Time end, int64_t out_bytes)
      : rate_(rate),
        poisson_(poisson),
        rng_(seed),
        end_(end),
        calls_(clients, std::move(start), timeout, slots, out_bytes,
               [this](size_t i, Sample s) { Finished(i, std::move(s)); }) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < calls_.size(); ++i) free_.push_back(i);
  }

  // The samples of the calls made; *dropped_at gets the intended times of arrivals that
  // found no free slot.
  std::vector<Sample> Run(std::vector<absl::Time>* dropped_at) {
    std::exponential_distribution<double> gap(rate_);
    absl::Time next = absl::Now();
    size_t sent = 0;
    while (next < end_) {
      const absl::Duration wait = next - absl::Now();
      if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
      std::optional<size_t> slot;
      {
        absl::MutexLock lock(&mu_);
        if (!free_.empty()) {
          slot = free_.back();
          free_.pop_back();
        }
      }
      if (slot) {
        calls_.Start(*slot, next, sent++);
      } else {
        dropped_at->push_back(next);
      }
      next += absl::Seconds(poisson_ ? gap(rng_) : 1.0 / rate_);
    }
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](OpenLoop* loop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop->mu_) {
          return loop->free_.size() == loop->calls_.size();
        },
        this));
    return std::move(samples_);
  }

 private:
  void Finished(size_t i, Sample s) {
    absl::MutexLock lock(&mu_);
    samples_.push_back(std::move(s));
    free_.push_back(i);
  }

  const double rate_;
  const bool poisson_;
  std::mt19937_64 rng_;
  const absl::Time end_;
  absl::Mutex mu_;
  std::vector<size_t> free_ ABSL_GUARDED_BY(mu_);
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
  CallSlots calls_;  // last: its callbacks use the members above
};

// Submits one request of the benchmark's RPC on a stream; C goes to the caller's buffer
// in `options`.
using StreamSubmit = std::function<void(MatmulStream*, const StreamCallOptions&, MatmulResult*,
                                        std::function<void(absl::Status)>)>;

// --stream: `streams` MatmulStreams over the channels (round-robin), each keeping
// `outstanding` requests in flight until `end`; each answer records its sample and sends
// its slot's next request on the same stream.
class StreamClosedLoop {
 public:
  StreamClosedLoop(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                   StreamSubmit submit, absl::Duration timeout, int streams, int outstanding,
                   absl::Time end, int64_t out_bytes, AnswerSampler* sampler)
      : submit_(std::move(submit)), timeout_(timeout), end_(end), sampler_(sampler) {
    StreamOptions options;
    options.max_outstanding = outstanding;
    for (int i = 0; i < streams; ++i) {
      streams_.push_back(std::make_unique<MatmulStream>(
          channels[static_cast<size_t>(i) % channels.size()], options));
      for (int j = 0; j < outstanding; ++j) {
        auto slot = std::make_unique<Slot>();
        slot->stream = streams_.back().get();
        slot->out.resize(static_cast<size_t>(out_bytes));
        slots_.push_back(std::move(slot));
      }
    }
  }

  // The samples, and the first stream that did not end cleanly (OK when all did).
  std::vector<Sample> Run(absl::Status* streams_status) {
    {
      absl::MutexLock lock(&mu_);
      active_ = static_cast<int>(slots_.size());
    }
    for (const auto& slot : slots_) Start(slot.get());
    done_.WaitForNotification();
    *streams_status = absl::OkStatus();
    for (const auto& stream : streams_) {
      const absl::Status s = stream->Close();
      if (streams_status->ok()) *streams_status = s;
    }
    absl::MutexLock lock(&mu_);
    return std::move(samples_);
  }

 private:
  struct Slot {
    MatmulStream* stream = nullptr;
    std::vector<char> out;  // C, the caller's buffer
    MatmulResult result;
    absl::Time from;
  };

  void Start(Slot* slot) {
    slot->result = MatmulResult();
    slot->from = absl::Now();
    StreamCallOptions options;
    options.timeout = timeout_;
    options.c_out = absl::MakeSpan(slot->out);
    submit_(slot->stream, options, &slot->result,
            [this, slot](absl::Status status) { Finished(slot, status); });
  }

  void Finished(Slot* slot, const absl::Status& status) {
    Sample s;
    s.start = slot->from;
    s.end = absl::Now();
    SetOutcome(status, &s);
    if (status.ok()) SetServerTimes(slot->result, &s);
    if (status.ok() && sampler_ != nullptr) sampler_->Offer(slot->result.c());
    {
      absl::MutexLock lock(&mu_);
      samples_.push_back(std::move(s));
    }
    // A stream that has ended fails every later request at once: stop that slot.
    if (absl::Now() < end_ && status.code() != absl::StatusCode::kUnavailable &&
        status.code() != absl::StatusCode::kFailedPrecondition) {
      Start(slot);
      return;
    }
    // Notified after the lock is let go: the waiter may destroy this (and mu_) at once.
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      last = --active_ == 0;
    }
    if (last) done_.Notify();
  }

  const StreamSubmit submit_;
  const absl::Duration timeout_;
  const absl::Time end_;
  AnswerSampler* const sampler_;
  absl::Mutex mu_;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification done_;
  std::vector<std::unique_ptr<MatmulStream>> streams_;
  std::vector<std::unique_ptr<Slot>> slots_;  // their requests reference the slots
};

// CPU seconds of the server (--server_pid), of this process and of the whole host over
// the measured window, read by a thread that wakes at its start and end.
class WindowCpu {
 public:
  WindowCpu(int server_pid, absl::Time start, absl::Time end)
      : thread_([this, server_pid, start, end] {
          absl::SleepFor(start - absl::Now());
          const absl::StatusOr<double> server0 =
              server_pid > 0 ? ProcessCpuSeconds(server_pid) : absl::StatusOr<double>(0.0);
          const absl::StatusOr<double> self0 = ProcessCpuSeconds(0);
          const absl::StatusOr<double> host0 = HostBusyCpuSeconds();
          absl::SleepFor(end - absl::Now());
          const absl::StatusOr<double> server1 =
              server_pid > 0 ? ProcessCpuSeconds(server_pid) : absl::StatusOr<double>(0.0);
          const absl::StatusOr<double> self1 = ProcessCpuSeconds(0);
          const absl::StatusOr<double> host1 = HostBusyCpuSeconds();
          if (host0.ok() && host1.ok()) host_s_ = *host1 - *host0;
          if (server0.ok() && server1.ok()) server_s_ = *server1 - *server0;
          if (self0.ok() && self1.ok()) client_s_ = *self1 - *self0;
          server_ok_ = server_pid > 0 && server0.ok() && server1.ok();
        }) {}
  // Joins; then the seconds are final.
  void Join() { thread_.join(); }
  double server_s() const { return server_s_; }
  double client_s() const { return client_s_; }
  double host_s() const { return host_s_; }  // 0: not measured
  bool server_ok() const { return server_ok_; }

 private:
  double server_s_ = 0, client_s_ = 0, host_s_ = 0;
  bool server_ok_ = false;
  std::thread thread_;
};

}  // namespace

int RunBench(const CliOptions& o) {
  if (o.concurrency < 1 || o.channels < 1 || o.duration_s <= 0 || o.warmup_s < 0) {
    std::fprintf(stderr,
                 "error: --concurrency and --channels must be >= 1, --duration_s > 0, "
                 "--warmup_s >= 0\n");
    return 1;
  }
  if (o.rate < 0 || (o.rate > 0 && o.local) || (o.arrivals != "poisson" && o.arrivals != "fixed")) {
    std::fprintf(stderr,
                 "error: --rate must be >= 0 and runs against a server (not --local); "
                 "--arrivals is poisson or fixed\n");
    return 1;
  }
  if (o.server_pid > 0 && !ProcessCpuSeconds(o.server_pid).ok()) {
    std::fprintf(stderr, "error: --server_pid=%d: no such process on this host\n", o.server_pid);
    return 1;
  }
  if (o.quantized && o.local) {
    std::fprintf(stderr, "error: --quantized runs against a server; --local has no quantized path\n");
    return 1;
  }
  if (o.stream && (o.local || o.async || o.rate > 0 || o.shm || o.outstanding < 1 ||
                   o.outstanding > 65536)) {
    std::fprintf(stderr,
                 "error: --stream runs a closed loop against a server (not with --local, "
                 "--async, --rate or --shm), --outstanding in [1, 65536]\n");
    return 2;
  }
  if (o.verify && (o.local || o.shm)) {
    std::fprintf(stderr, "error: --verify checks the server's answers: not with --local or --shm\n");
    return 2;
  }
  if (o.shm && (o.quantized || o.local || o.async || o.rate > 0 || o.resident_b)) {
    std::fprintf(stderr,
                 "error: --shm drives Matmul in a closed loop (not with --quantized, --local, "
                 "--async, --rate or --resident_b)\n");
    return 1;
  }
  absl::StatusOr<GrpcArgs> grpc_args = ParseGrpcArgs(o.grpc_args);
  if (!grpc_args.ok()) return ReportError(grpc_args.status());
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  if (!o.local) {
    for (int i = 0; i < o.channels; ++i) {
      channels.push_back(ConnectChannel(o.server(), i, *grpc_args));
    }
  }
  if (int rc = Preflight(o, o.quantized, o.local ? nullptr : channels.front().get(),
                         o.concurrency - 1);
      rc != 0) {
    return rc;
  }
  // Every connection up before the clock starts: a connection attempt that fails once (a
  // busy machine; gRPC tries again after a backoff) is not the server's answer to a call,
  // and calls would fail fast on it meanwhile.
  for (size_t i = 0; i < channels.size(); ++i) {
    if (!channels[i]->WaitForConnected(
            absl::ToChronoTime(absl::Now() + absl::Seconds(o.timeout_s)))) {
      std::fprintf(stderr, "error: connection %zu of %d to %s did not come up within %.0f s\n",
                   i + 1, o.channels, o.target.c_str(), o.timeout_s);
      return 1;
    }
  }
  if (o.resident_b && (o.local || HandleOf(o.b_path))) {
    std::fprintf(stderr,
                 "error: --resident_b uploads B to the server: not with --local, nor with a "
                 "B that is resident already (--b @HANDLE)\n");
    return 1;
  }
  // Resident tensors (operands named @HANDLE, and B with --resident_b), and the pool of
  // connections for striped calls and parallel uploads (after the callers' own).
  std::shared_ptr<ConnectionPool> pool;
  std::unique_ptr<TensorStoreClient> store;
  std::unique_ptr<ServerResidentLookup> resident;
  if (!o.local) {
    const Endpoint server = o.server();
    const GrpcArgs extra = *grpc_args;
    pool = std::make_shared<ConnectionPool>(
        [server, extra, n = o.channels](int index) {
          return ConnectChannel(server, n + index, extra);
        },
        SingleAddressTarget(o.target));
    store = std::make_unique<TensorStoreClient>(channels.front(), pool);
    resident = std::make_unique<ServerResidentLookup>(store.get(), absl::Seconds(o.timeout_s));
  }
  // Matmul (MatmulInputs) or QuantizedMatmul (QuantizedInputs, --quantized).
  std::unique_ptr<MatmulInputs> matmul;
  std::unique_ptr<QuantizedInputs> quantized;
  absl::Status built = absl::OkStatus();
  if (o.quantized) {
    absl::StatusOr<std::unique_ptr<QuantizedInputs>> q = BuildQuantizedInputs(o, resident.get());
    if (q.ok()) quantized = *std::move(q);
    built = q.status();
  } else {
    absl::StatusOr<std::unique_ptr<MatmulInputs>> m = BuildMatmulInputs(o, resident.get());
    if (m.ok()) matmul = *std::move(m);
    built = m.status();
  }
  if (!built.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(built.message()).c_str());
    return 1;
  }
  // --resident_b: B goes up once, and is deleted however the bench ends.
  std::string b_handle;
  int64_t b_bytes = 0;
  double b_upload_s = 0;
  struct DeleteAtExit {
    TensorStoreClient* store;
    const std::string* handle;
    absl::Duration timeout;
    ~DeleteAtExit() {
      if (handle->empty()) return;
      if (absl::Status s = store->DeleteTensor(*handle, timeout); !s.ok()) {
        std::fprintf(stderr, "warning: deleting the resident B failed: %s\n",
                     s.ToString().c_str());
      }
    }
  } delete_b{store.get(), &b_handle, absl::Seconds(o.timeout_s)};
  if (o.resident_b) {
    PutOptions put;
    put.label = "gemm-cli bench B";
    put.timeout = absl::Seconds(o.timeout_s);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> handle;
    if (o.quantized) {
      const QuantizedMatmulArgs args = ArgsOf(quantized->request);
      b_bytes = static_cast<int64_t>(args.b.data.size() + args.b.scales.size());
      handle = store->PutTensor(args.b, put);
    } else {
      const MatmulArgs args = ArgsOf(matmul->request);
      b_bytes = static_cast<int64_t>(args.b.data.size());
      handle = store->PutTensor(args.b, put);
    }
    b_upload_s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!handle.ok()) return ReportRpcError("PutTensor (B)", handle.status());
    b_handle = *handle;
  }

  BenchReport report;
  report.mode = o.local       ? "in-process"
                : o.rate > 0  ? "grpc-open-loop"
                : o.stream    ? "grpc-stream"
                : o.async     ? "grpc-async"
                              : "grpc";
  if (o.stream) report.outstanding = o.outstanding;
  if (o.rate > 0) {
    report.target_rate = o.rate;
    report.arrivals = o.arrivals;
  }
  report.target = o.local ? "cpu backend (OpenBLAS)" : o.target;
  report.concurrency = o.concurrency;
  report.channels = o.local ? 0 : o.channels;
  report.warmup_s = o.warmup_s;
  report.duration_s = o.duration_s;
  report.resident_b = !b_handle.empty();
  report.resident_b_bytes = b_bytes;
  report.resident_b_upload_s = b_upload_s;
  const char* rpc_name = o.quantized ? "QuantizedMatmul" : "Matmul";
  BlockingCall blocking;
  StartCall start;
  StreamSubmit stream_submit;
  // How many connections each call goes over, for the report.
  std::function<int(const GemmClient&, const CallOptions&)> stripes_of;
  // --shm: the operands in a region, and the call of worker i writing C to slot i.
  std::unique_ptr<ShmOperands> shm;
  std::function<BlockingCall(int)> blocking_slot;
  if (o.quantized) {
    const QuantizedInputs& q = *quantized;
    report.shape = absl::StrCat(q.m, "x", q.n, "x", q.k, " batch=1");
    report.dtype = absl::StrCat(QuantFormatName(q.format), q.weight_only ? " weight-only" : "");
    report.precision = "QUANTIZED";
    report.flops_per_request = 2.0 * static_cast<double>(q.m * q.n) * static_cast<double>(q.k);
    report.sent_bytes_per_request = q.sent_bytes - (b_handle.empty() ? 0 : b_bytes);
    report.received_bytes_per_request = q.m * q.n * 4;
    QuantizedMatmulArgs args = ArgsOf(q.request);
    args.b_ref = b_handle.empty() ? args.b_ref : b_handle;  // B inline is then not sent
    blocking = [args](GemmClient* client, const CallOptions& options, MatmulResult* result) {
      return client->QuantizedMatmul(args, options, result);
    };
    start = [args](GemmClient* client, const CallOptions& options, MatmulResult* result,
                   std::function<void(absl::Status)> done) {
      client->QuantizedMatmulAsync(args, options, result, std::move(done));
    };
    stream_submit = [args](MatmulStream* stream, const StreamCallOptions& options,
                           MatmulResult* result, std::function<void(absl::Status)> done) {
      stream->Submit(args, options, result, std::move(done));
    };
    stripes_of = [args](const GemmClient& client, const CallOptions& options) {
      return client.StripesFor(args, options);
    };
  } else {
    const GemmProblem& p = matmul->problem;
    report.shape = absl::StrCat(p.m, "x", p.n, "x", p.k, " batch=", p.batch);
    report.dtype = DataTypeName(p.a_type);
    report.precision = PrecisionName(p.precision);
    report.flops_per_request = p.Flops();
    report.sent_bytes_per_request = matmul->payload_bytes - (b_handle.empty() ? 0 : b_bytes);
    report.received_bytes_per_request =
        p.batch * p.m * p.n * static_cast<int64_t>(DataTypeSize(p.c_type));
    MatmulArgs args = ArgsOf(matmul->request);
    args.b_ref = b_handle.empty() ? args.b_ref : b_handle;  // B inline is then not sent
    if (o.shm) {
      absl::StatusOr<std::unique_ptr<ShmOperands>> made = ShmOperands::Create(
          channels.front(), o.shm_key,
          {args.a_ref.empty() ? args.a.data : absl::string_view(),
           args.b_ref.empty() ? args.b.data : absl::string_view(),
           args.c && args.c_ref.empty() ? args.c->data : absl::string_view()},
          o.concurrency, report.received_bytes_per_request);
      if (!made.ok()) return ReportRpcError("--shm: the shared-memory region", made.status());
      shm = *std::move(made);
      args.a.shm = shm->Payload(0);
      args.b.shm = shm->Payload(1);
      if (args.c) args.c->shm = shm->Payload(2);
      args.c_shm = shm->CSlot(0);
      // The payload columns keep the call's tensor bytes, which the region moves instead
      // of the wire, so the rate compares with the other transports'.
      report.mode = "grpc-shm";
      blocking_slot = [args, &shm](int slot) -> BlockingCall {
        MatmulArgs mine = args;
        mine.c_shm = shm->CSlot(slot);
        return [mine](GemmClient* client, const CallOptions& options, MatmulResult* result) {
          return client->Matmul(mine, options, result);
        };
      };
    }
    blocking = [args](GemmClient* client, const CallOptions& options, MatmulResult* result) {
      return client->Matmul(args, options, result);
    };
    start = [args](GemmClient* client, const CallOptions& options, MatmulResult* result,
                   std::function<void(absl::Status)> done) {
      client->MatmulAsync(args, options, result, std::move(done));
    };
    stream_submit = [args](MatmulStream* stream, const StreamCallOptions& options,
                           MatmulResult* result, std::function<void(absl::Status)> done) {
      stream->Submit(args, options, result, std::move(done));
    };
    stripes_of = [args](const GemmClient& client, const CallOptions& options) {
      return client.StripesFor(args, options);
    };
  }

  // --verify: a sample of the answers, checked against FP64 once the bench is over.
  std::unique_ptr<AnswerSampler> sampler;
  if (o.verify) sampler = std::make_unique<AnswerSampler>(report.received_bytes_per_request);
  CallClients callers;
  callers.stripes = o.stripes;
  callers.stripe_chunk_bytes = o.chunk_bytes();
  callers.row_blocks = o.row_blocks;
  callers.sampler = sampler.get();
  for (const auto& channel : channels) {
    callers.clients.push_back(std::make_shared<GemmClient>(channel, pool));
  }
  if (!o.local) {
    // One call first: fail fast (and learn the kernel) before starting the clock.
    GemmClient& client = *callers.clients.front();
    CallOptions options;
    options.timeout = absl::Seconds(o.timeout_s);
    options.stripes = o.stripes;
    options.stripe_chunk_bytes = o.chunk_bytes();
    options.row_blocks = o.row_blocks;
    MatmulResult result;
    const absl::Status status = blocking(&client, options, &result);
    if (!status.ok()) return ReportRpcError(rpc_name, status);
    if (sampler != nullptr) sampler->Offer(result.c());
    report.stripes = stripes_of(client, options);
    report.kernel = result.info().kernel();
  } else {
    report.kernel = absl::StrCat(CpuKernelName(matmul->problem.precision), " (in-process)");
  }

  const absl::Time begin = absl::Now();
  const absl::Time measure_start = begin + absl::Seconds(o.warmup_s);
  const absl::Time measure_end = measure_start + absl::Seconds(o.duration_s);
  const int64_t out_bytes = report.received_bytes_per_request;

  std::function<Worker(int)> make_worker;
  if (o.local) {
    make_worker = [&](int) -> Worker {
      auto out = std::make_shared<std::string>(static_cast<size_t>(out_bytes), '\0');
      return [&, out] {
        Sample s;
        s.start = absl::Now();
        GemmOperands ops = matmul->operands;
        ops.c_out = out->data();
        const absl::Status status = CpuGemm(matmul->problem, ops);
        s.end = absl::Now();
        s.code = static_cast<grpc::StatusCode>(status.code());
        if (!status.ok()) s.message = std::string(status.message());
        return s;
      };
    };
  } else {
    make_worker = [&](int i) -> Worker {
      std::shared_ptr<GemmClient> client =
          callers.clients[static_cast<size_t>(i % o.channels)];
      auto out = std::make_shared<std::vector<char>>(static_cast<size_t>(out_bytes));
      const BlockingCall call = blocking_slot ? blocking_slot(i) : blocking;
      return [&, client, out, call] {
        Sample s;
        CallOptions options;
        options.timeout = absl::Seconds(o.timeout_s);
        options.stripes = o.stripes;
        options.stripe_chunk_bytes = o.chunk_bytes();
        options.row_blocks = o.row_blocks;
        options.c_out = absl::MakeSpan(*out);
        MatmulResult result;
        s.start = absl::Now();
        const absl::Status status = call(client.get(), options, &result);
        s.end = absl::Now();
        SetOutcome(status, &s);
        if (status.ok()) SetServerTimes(result, &s);
        if (status.ok() && sampler != nullptr) sampler->Offer(result.c());
        return s;
      };
    };
  }
  WindowCpu cpu(o.server_pid, measure_start, measure_end);
  std::vector<absl::Time> dropped_at;
  std::vector<Sample> samples;
  if (o.rate > 0) {
    samples = OpenLoop(callers, start, absl::Seconds(o.timeout_s), o.concurrency, o.rate,
                       o.arrivals == "poisson", o.seed, measure_end, out_bytes)
                  .Run(&dropped_at);
  } else if (o.stream) {
    absl::Status streams_status;
    samples = StreamClosedLoop(channels, stream_submit, absl::Seconds(o.timeout_s),
                               o.concurrency, o.outstanding, measure_end, out_bytes,
                               sampler.get())
                  .Run(&streams_status);
    if (!streams_status.ok()) {
      std::fprintf(stderr, "warning: a stream ended with %s\n", streams_status.ToString().c_str());
    }
  } else if (o.async && !o.local) {
    samples = AsyncClosedLoop(callers, start, absl::Seconds(o.timeout_s), o.concurrency,
                              measure_end, out_bytes)
                  .Run();
  } else {
    samples = RunClosedLoop(o.concurrency, measure_end, make_worker);
  }
  cpu.Join();
  for (absl::Time t : dropped_at) report.dropped += t >= measure_start ? 1 : 0;

  std::vector<double> latencies_ms, error_latencies_ms;
  double queue_us = 0, copy_in_us = 0, compute_us = 0, copy_out_us = 0, total_us = 0;
  double batch_sizes = 0;
  double compute_shares_us = 0;  // each launch's compute split among its requests
  StripedSteps striped_sum;
  for (const Sample& s : samples) {
    if (s.start < measure_start || s.end > measure_end) continue;
    if (s.code != grpc::StatusCode::OK) {
      ++report.errors[StatusCodeName(s.code)];
      report.error_examples.emplace(StatusCodeName(s.code), s.message);
      error_latencies_ms.push_back(absl::ToDoubleMilliseconds(s.end - s.start));
      continue;
    }
    ++report.ok;
    latencies_ms.push_back(absl::ToDoubleMilliseconds(s.end - s.start));
    queue_us += static_cast<double>(s.queue_us);
    copy_in_us += static_cast<double>(s.copy_in_us);
    compute_us += static_cast<double>(s.compute_us);
    copy_out_us += static_cast<double>(s.copy_out_us);
    total_us += static_cast<double>(s.total_us);
    batch_sizes += static_cast<double>(s.batch_size);
    compute_shares_us += static_cast<double>(s.compute_us) / std::max<double>(1, s.batch_size);
    if (s.striped) {
      ++report.striped_calls;
      striped_sum.put += s.striped->put;
      striped_sum.call += s.striped->call;
      striped_sum.get += s.striped->get;
      striped_sum.cleanup += s.striped->cleanup;
      report.striped_row_blocks = std::max(report.striped_row_blocks, s.striped->row_blocks);
    }
  }
  report.latency = SummarizeLatencies(std::move(latencies_ms));
  report.error_latency = SummarizeLatencies(std::move(error_latencies_ms));
  if (report.ok > 0) {
    const double ok = static_cast<double>(report.ok);
    report.server_queue_ms = queue_us / 1e3 / ok;
    report.server_copy_in_ms = copy_in_us / 1e3 / ok;
    report.server_compute_ms = compute_us / 1e3 / ok;
    report.server_copy_out_ms = copy_out_us / 1e3 / ok;
    report.server_total_ms = total_us / 1e3 / ok;
    report.mean_batch_size = batch_sizes / ok;
    report.server_compute_per_request_ms = compute_shares_us / 1e3 / ok;
    if (report.striped_calls > 0) {
      const double n = static_cast<double>(report.striped_calls);
      report.striped_put_ms = absl::ToDoubleMilliseconds(striped_sum.put) / n;
      report.striped_call_ms = absl::ToDoubleMilliseconds(striped_sum.call) / n;
      report.striped_get_ms = absl::ToDoubleMilliseconds(striped_sum.get) / n;
      report.striped_cleanup_ms = absl::ToDoubleMilliseconds(striped_sum.cleanup) / n;
    }
    if (cpu.server_ok()) report.server_cpu_us_per_request = cpu.server_s() / ok * 1e6;
    report.client_cpu_us_per_request = cpu.client_s() / ok * 1e6;
    report.host_cores_busy = report.duration_s > 0 ? cpu.host_s() / report.duration_s : 0;
    report.host_cores = static_cast<int>(std::thread::hardware_concurrency());
  }
  if (sampler != nullptr) {
    absl::StatusOr<SampleCheck> check =
        CheckSamples(matmul.get(), quantized.get(), sampler->Take());
    if (!check.ok()) {
      std::fprintf(stderr, "error: verify: %s\n", std::string(check.status().message()).c_str());
      return 1;
    }
    report.verified = check->checked;
    report.verify_max_error = check->max_error;
    report.verify_tolerance = check->tolerance;
  }
  const std::string text = o.json ? FormatBenchJson(report) : FormatBenchText(report);
  std::fputs(text.c_str(), stdout);
  if (report.dropped > 0) {
    std::fprintf(stderr,
                 "warning: %d arrivals were dropped: each found %d calls in flight "
                 "(--concurrency), so the server fell behind %.1f/s; latencies do not count "
                 "them (raise --concurrency to queue them instead)\n",
                 report.dropped, o.concurrency, o.rate);
  }
  if (report.verified > 0 && !(report.verify_max_error <= report.verify_tolerance)) return 3;
  return report.ok > 0 ? 0 : 1;
}

}  // namespace gemmd
