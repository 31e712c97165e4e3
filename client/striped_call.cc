#include "client/striped_call.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace gemmd {
namespace {

// How long deleting the temporaries may take: on its own clock, since a failed call may
// have used up its deadline.
constexpr absl::Duration kDeleteTimeout = absl::Seconds(5);
constexpr char kLabel[] = "striped call";

int64_t ElementBytes(gemm::v1::DataType type) {
  switch (type) {
    case gemm::v1::DATA_TYPE_FLOAT16:
    case gemm::v1::DATA_TYPE_BFLOAT16:
      return 2;
    case gemm::v1::DATA_TYPE_INT8:
      return 1;
    default:  // FLOAT32 (and UNSPECIFIED, which means it), INT32
      return 4;
  }
}

// C's bytes, where the client can tell them from the inline operands; -1 where it cannot
// (an operand by handle, a shape the server will refuse anyway).
int64_t MatmulCBytes(const MatmulArgs& args) {
  if (!args.a_ref.empty() || !args.b_ref.empty()) return -1;
  const std::vector<int64_t>& a = args.a.shape;
  const std::vector<int64_t>& b = args.b.shape;
  if (a.size() < 2 || a.size() > 3 || b.size() < 2 || b.size() > 3) return -1;
  const int64_t m = args.transpose_a ? a[a.size() - 1] : a[a.size() - 2];
  const int64_t n = args.transpose_b ? b[b.size() - 2] : b[b.size() - 1];
  const int64_t batch = std::max(a.size() == 3 ? a[0] : 1, b.size() == 3 ? b[0] : 1);
  if (m < 1 || n < 1 || batch < 1) return -1;
  return batch * m * n * ElementBytes(args.output_dtype);
}

int64_t QuantizedCBytes(const QuantizedMatmulArgs& args) {
  const std::vector<int64_t>* a =
      args.a ? &args.a->shape : args.a_dense ? &args.a_dense->shape : nullptr;
  if (a == nullptr || a->size() != 2 || !args.b_ref.empty() || args.b.shape.size() != 2) {
    return -1;
  }
  if ((*a)[0] < 1 || args.b.shape[0] < 1) return -1;
  return (*a)[0] * args.b.shape[0] * 4;  // C is FP32
}

int64_t QuantizedBytes(const QuantizedTensorRef& t) {
  return static_cast<int64_t>(t.data.size() + t.scales.size());
}

// A temporary lives as long as the call may: past its deadline nobody reads it.
uint32_t TtlFor(absl::Duration timeout) {
  const int64_t s = absl::ToInt64Seconds(absl::Ceil(timeout, absl::Seconds(1)));
  return static_cast<uint32_t>(std::clamp<int64_t>(s, 1, 24 * 3600));
}

// The parts of one call reached two server processes (a handle of another instance).
bool Spread(const absl::Status& s) {
  return s.code() == absl::StatusCode::kNotFound &&
         absl::StrContains(s.message(), "was issued by server instance");
}

// A server that cannot keep the temporaries at all: no PutTensor (another implementation
// of the API), or no tensor store (--tensor_store_bytes=0).
bool NoStore(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnimplemented ||
         (s.code() == absl::StatusCode::kFailedPrecondition &&
          absl::StrContains(s.message(), "keeps no resident tensors"));
}

}  // namespace

class StripedCall::Temporaries {
 public:
  explicit Temporaries(StripedCall* owner) : owner_(owner) {}
  // Deleted whatever happened; a delete that fails leaves the TTL to do it. After a call
  // that succeeded the deletes go out without waiting (the caller has C; the server frees
  // the memory a round trip later); after a failure they are waited for, so a call made
  // again on one connection finds their room free.
  ~Temporaries() {
    absl::MutexLock lock(&mu_);  // every other user is done
    if (handles_.empty()) return;
    if (succeeded_) {
      owner_->DeleteLater(std::move(handles_));
    } else {
      owner_->continuing_store_.DeleteTensors(handles_, kDeleteTimeout).IgnoreError();
    }
  }
  // Thread-safe (a call in row blocks puts A's blocks on a thread of its own).
  void Add(std::string handle) {
    absl::MutexLock lock(&mu_);
    handles_.push_back(std::move(handle));
  }
  void Succeeded() { succeeded_ = true; }
  // One the call made, which its later RPCs name (gemmd-continues) so a server that
  // starts draining serves the call to its end; empty before the first.
  std::string first() const {
    absl::MutexLock lock(&mu_);
    return handles_.empty() ? std::string() : handles_.front();
  }

 private:
  StripedCall* const owner_;
  mutable absl::Mutex mu_;
  std::vector<std::string> handles_ ABSL_GUARDED_BY(mu_);
  bool succeeded_ = false;
};

StripedCall::~StripedCall() {
  // Each delete ends by its deadline (kDeleteTimeout), so this wait does too.
  absl::MutexLock lock(&deletes_->mu,
                       absl::Condition(+[](int* n) { return *n == 0; }, &deletes_->pending));
}

void StripedCall::DeleteLater(std::vector<std::string> handles) {
  {
    absl::MutexLock lock(&deletes_->mu);
    ++deletes_->pending;
  }
  // On the pool's first connection, which reaches a draining server (as the call's RPCs).
  continuing_store_.DeleteTensorsAsync(handles, kDeleteTimeout,
                                       [deletes = deletes_](const absl::Status&) {
                                         absl::MutexLock lock(&deletes->mu);
                                         --deletes->pending;
                                       });
}

StripedCall::StripedCall(std::shared_ptr<grpc::ChannelInterface> channel,
                         std::shared_ptr<ConnectionPool> pool)
    : pool_(pool),
      plain_(channel),
      store_(channel, pool),
      continuing_(pool->Channel(0)),
      continuing_store_(pool->Channel(0), pool) {}

int StripedCall::Decide(int64_t call_bytes, int requested) const {
  if (requested == 1) return 1;
  if (requested >= 2) return std::min(requested, kMaxStripes);
  if (!pool_->single_address() || no_store_.load(std::memory_order_relaxed) ||
      call_bytes < kStripeCallBytes) {
    return 1;
  }
  return kDefaultStripes;
}

bool StripedCall::FallBack(const absl::Status& status, bool put_failed,
                           const CallOptions& options) {
  if (Spread(status)) {
    pool_->MarkSpread();
    return true;
  }
  // The client's own choice gives way where one connection would serve the call: a server
  // that keeps no temporaries (not asked again), or a store with no room for them now.
  if (options.stripes != 0 || !put_failed) return false;
  if (NoStore(status)) {
    no_store_.store(true, std::memory_order_relaxed);
    return true;
  }
  return status.code() == absl::StatusCode::kResourceExhausted;
}

int StripedCall::StripesFor(const MatmulArgs& args, const CallOptions& options) const {
  int64_t bytes = std::max<int64_t>(0, MatmulCBytes(args));
  if (args.a_ref.empty()) bytes += static_cast<int64_t>(args.a.data.size());
  if (args.b_ref.empty()) bytes += static_cast<int64_t>(args.b.data.size());
  if (args.c_ref.empty() && args.c) bytes += static_cast<int64_t>(args.c->data.size());
  return Decide(bytes, options.stripes);
}

int StripedCall::StripesFor(const QuantizedMatmulArgs& args, const CallOptions& options) const {
  int64_t bytes = std::max<int64_t>(0, QuantizedCBytes(args));
  if (args.a) bytes += QuantizedBytes(*args.a);
  if (args.a_dense) bytes += static_cast<int64_t>(args.a_dense->data.size());
  if (args.b_ref.empty()) bytes += QuantizedBytes(args.b);
  return Decide(bytes, options.stripes);
}

template <typename Tensor>
absl::StatusOr<TensorStoreClient::OpenedTensor> StripedCall::OpenTemporary(
    const Tensor& tensor, const CallOptions& options, int stripes, absl::Time deadline,
    const std::string& device, Temporaries* temporaries) {
  PutOptions put;
  put.ttl_s = TtlFor(options.timeout);
  put.label = kLabel;
  put.device = device;
  put.connections = stripes;
  put.chunk_bytes = options.stripe_chunk_bytes > 0 ? options.stripe_chunk_bytes : kStripeChunkBytes;
  put.timeout = deadline - absl::Now();
  put.temporary = true;
  put.continues = temporaries->first();
  TensorStoreClient& store = put.continues.empty() ? store_ : continuing_store_;
  absl::StatusOr<TensorStoreClient::OpenedTensor> open = store.Open(tensor, put);
  if (open.ok()) temporaries->Add(open->stored.handle);
  return open;
}

template <typename Args, typename Call>
absl::Status StripedCall::Finish(Args inner, const CallOptions& options, absl::Time deadline,
                                 int stripes, bool stripe_c, Temporaries* temporaries,
                                 const Call& call, StripedSteps* steps,
                                 MatmulResult* result) {
  if (stripe_c) inner.keep_c = KeepResult{TtlFor(options.timeout), kLabel, /*temporary=*/true};
  CallOptions one = options;
  one.stripes = 1;
  one.timeout = deadline - absl::Now();
  one.continues = temporaries->first();
  const absl::Time start = absl::Now();
  if (absl::Status s = call(inner, one, result); !s.ok()) return s;
  const absl::Time called = absl::Now();
  steps->call = called - start;
  if (!stripe_c) return absl::OkStatus();

  const std::string handle = result->info_.c_ref().handle();
  temporaries->Add(handle);
  gemm::v1::TensorHeader c;
  *c.mutable_shape() = result->info_.c().shape();
  c.set_dtype(result->info_.c().dtype());
  absl::StatusOr<TensorRows> rows = RowsOf(c);
  if (!rows.ok()) {
    return absl::InternalError(absl::StrCat("the response's C: ", rows.status().message()));
  }
  const size_t bytes = static_cast<size_t>(rows->data_bytes());
  char* out = nullptr;
  if (!options.c_out.empty()) {
    if (options.c_out.size() < bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("C is ", bytes, " bytes; c_out holds ", options.c_out.size()));
    }
    out = options.c_out.data();
  } else {
    result->owned_.reset(new char[bytes > 0 ? bytes : 1]);  // uninitialized: read into below
    out = result->owned_.get();
  }
  // In ranges of 1 MiB at least, as the operands' parts.
  absl::StatusOr<gemm::v1::TensorHeader> read = store_.ReadInto(
      handle, *rows, absl::MakeSpan(out, bytes), {},
      UploadConnections(rows->data_bytes(), rows->rows, stripes), deadline - absl::Now());
  if (!read.ok()) return read.status();
  steps->get = absl::Now() - called;
  // As the one-connection call answers: C's shape and dtype, no handle (it is gone).
  result->info_.clear_c_ref();
  result->c_ = absl::string_view(out, bytes);
  return absl::OkStatus();
}

template <typename Args, typename PutOperands, typename Call>
absl::Status StripedCall::Run(const Args& args, const CallOptions& options, int stripes,
                              int64_t c_bytes, const PutOperands& put_operands,
                              const Call& call, MatmulResult* result) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.timeout;
  result->striped_steps_.reset();
  StripedSteps steps;
  absl::Time cleanup_start;
  // Forced stripes stripe every inline operand; chosen ones only the large.
  const int64_t least = options.stripes >= 2 ? 1 : kStripeOperandBytes;
  absl::Status status;
  bool put_failed = false;
  {
    Temporaries temporaries(this);
    Args inner = args;
    std::string device;  // the first temporary's: the others go there too
    // The operands are opened one after another (each a small RPC: the first decides the
    // device and is the call the others continue), then all their parts sent at once.
    std::vector<TensorStoreClient::OpenedTensor> opened;
    // Opens `tensor` (dense or quantized, `bytes` in all) as a temporary and names it in
    // *ref, unless it is small or already by handle.
    auto put = [&](const auto& tensor, int64_t bytes, std::string* ref) -> absl::Status {
      if (!ref->empty() || bytes < least) return absl::OkStatus();
      absl::StatusOr<TensorStoreClient::OpenedTensor> open =
          OpenTemporary(tensor, options, stripes, deadline, device, &temporaries);
      if (!open.ok()) return open.status();
      if (device.empty()) device = open->stored.device;
      *ref = open->stored.handle;
      opened.push_back(*std::move(open));
      return absl::OkStatus();
    };
    status = put_operands(put, &inner);
    if (status.ok()) status = store_.SendParts(opened);
    put_failed = !status.ok();
    steps.put = absl::Now() - start;
    if (status.ok()) {
      status = Finish(std::move(inner), options, deadline, stripes,
                      !args.keep_c && c_bytes >= least, &temporaries, call, &steps, result);
    }
    if (status.ok()) temporaries.Succeeded();
    cleanup_start = absl::Now();
  }  // the temporaries are deleted here
  if (status.ok()) {
    steps.cleanup = absl::Now() - cleanup_start;
    result->striped_steps_ = steps;
    return status;
  }
  if (!FallBack(status, put_failed, options)) return status;
  CallOptions one = options;
  one.stripes = 1;
  one.timeout = deadline - absl::Now();
  return call(args, one, result);
}

int StripedCall::RowBlocksFor(const MatmulArgs& args, const CallOptions& options) const {
  if (options.row_blocks == 1 || no_row_plans_.load(std::memory_order_relaxed)) return 1;
  if (!args.a_ref.empty() || !args.b_ref.empty() || !args.c_ref.empty() || args.c || args.keep_c ||
      args.c_shm.set() || args.a.shm.set() || args.b.shm.set() || args.transpose_a ||
      args.beta != 0.0f || args.a.shape.size() != 2 || args.b.shape.size() != 2) {
    return 1;
  }
  const int64_t m = args.a.shape[0];
  const int64_t k = args.a.shape[1];
  // A malformed A is the server's to refuse, whole.
  if (m < 1 || k < 1 ||
      static_cast<int64_t>(args.a.data.size()) != m * k * ElementBytes(args.a.dtype)) {
    return 1;
  }
  // As Run stripes them: forced stripes stripe every operand, chosen ones only the large.
  const int64_t least = options.stripes >= 2 ? 1 : kStripeOperandBytes;
  if (static_cast<int64_t>(args.b.data.size()) < least || MatmulCBytes(args) < least) return 1;
  const int requested = options.row_blocks > 0 ? options.row_blocks : kDefaultRowBlocks;
  const int64_t most = (m + kRowPlanAlign - 1) / kRowPlanAlign;
  const int blocks = static_cast<int>(std::min<int64_t>({requested, most, kMaxRowBlocks}));
  return blocks >= 2 ? blocks : 1;
}

absl::Status StripedCall::MatmulInBlocks(const MatmulArgs& args, const CallOptions& options,
                                         int stripes, int blocks, bool* put_failed, bool* unplanned,
                                         MatmulResult* result) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.timeout;
  result->striped_steps_.reset();
  const int64_t m = args.a.shape[0];
  const int64_t k = args.a.shape[1];
  const int64_t n = args.transpose_b ? args.b.shape[0] : args.b.shape[1];
  const int64_t a_row_bytes = k * ElementBytes(args.a.dtype);
  const int64_t c_row_bytes = n * ElementBytes(args.output_dtype);
  // Whole panels of kRowPlanAlign rows, the last block whatever is left.
  const int64_t block_rows =
      ((m + blocks - 1) / blocks + kRowPlanAlign - 1) / kRowPlanAlign * kRowPlanAlign;
  const int count = static_cast<int>((m + block_rows - 1) / block_rows);
  auto rows_of = [&](int i) { return std::min(block_rows, m - i * block_rows); };

  const size_t c_bytes = static_cast<size_t>(m * c_row_bytes);
  char* out = nullptr;
  if (!options.c_out.empty()) {
    if (options.c_out.size() < c_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("C is ", c_bytes, " bytes; c_out holds ", options.c_out.size()));
    }
    out = options.c_out.data();
  } else {
    result->owned_.reset(new char[c_bytes > 0 ? c_bytes : 1]);  // each block reads its rows
    out = result->owned_.get();
  }

  StripedSteps steps;
  steps.row_blocks = count;
  absl::Status status;
  absl::Time cleanup_start;
  {
    Temporaries temporaries(this);
    std::string device;  // B's: every block goes there too
    // Puts `tensor` as a temporary (opened, then its parts sent on connections [0,
    // stripes)); its handle in *handle.
    auto put = [&](const TensorRef& tensor, std::string* handle) -> absl::Status {
      absl::StatusOr<TensorStoreClient::OpenedTensor> open =
          OpenTemporary(tensor, options, stripes, deadline, device, &temporaries);
      if (!open.ok()) return open.status();
      if (device.empty()) device = open->stored.device;
      *handle = open->stored.handle;
      return store_.SendParts({*open});
    };
    auto block_of_a = [&](int i) {
      TensorRef block = args.a;
      block.shape = {rows_of(i), k};
      block.data = args.a.data.substr(static_cast<size_t>(i * block_rows * a_row_bytes),
                                      static_cast<size_t>(rows_of(i) * a_row_bytes));
      return block;
    };

    std::string b_handle;
    std::vector<std::string> a_handles(static_cast<size_t>(count));
    status = put(args.b, &b_handle);
    if (status.ok()) status = put(block_of_a(0), &a_handles[0]);
    *put_failed = !status.ok();
    steps.put = absl::Now() - start;

    // Three stages at once, each in block order: A's blocks go up (a thread), each
    // block's Matmul runs once its A is up (this thread), and each block's C is read back
    // once computed (a thread). The first failure stops all three.
    struct Pipeline {
      absl::Mutex mu;
      int uploaded ABSL_GUARDED_BY(mu) = 1;  // A's blocks [0, uploaded) are on the server
      int computed ABSL_GUARDED_BY(mu) = 0;  // C's blocks [0, computed) are
      std::vector<std::string> a_handles ABSL_GUARDED_BY(mu);
      std::vector<std::string> c_handles ABSL_GUARDED_BY(mu);
      absl::Status failed ABSL_GUARDED_BY(mu);
      bool failed_in_put ABSL_GUARDED_BY(mu) = false;
      absl::CondVar changed;

      void Fail(absl::Status s, bool in_put) {
        absl::MutexLock lock(&mu);
        if (failed.ok()) {
          failed = std::move(s);
          failed_in_put = in_put;
        }
        changed.SignalAll();
      }
      // Waits until `*count` passes `i` (true) or a stage failed (false).
      bool WaitFor(const int* count, int i) {
        absl::MutexLock lock(&mu);
        while (*count <= i && failed.ok()) changed.Wait(&mu);
        return *count > i;
      }
    } pipe;
    {
      absl::MutexLock lock(&pipe.mu);
      pipe.a_handles = std::move(a_handles);
      pipe.c_handles.resize(static_cast<size_t>(count));
      if (!status.ok()) pipe.failed = status;
    }
    std::thread uploader;
    std::thread reader;
    gemm::v1::MatmulResponse first;  // the first block's answer: the call's
    gemm::v1::Timing timing;         // every block's, added
    if (status.ok()) {
      uploader = std::thread([&] {
        for (int i = 1; i < count; ++i) {
          {
            absl::MutexLock lock(&pipe.mu);
            if (!pipe.failed.ok()) return;
          }
          std::string handle;
          if (absl::Status s = put(block_of_a(i), &handle); !s.ok()) {
            pipe.Fail(std::move(s), /*in_put=*/true);
            return;
          }
          absl::MutexLock lock(&pipe.mu);
          pipe.a_handles[static_cast<size_t>(i)] = std::move(handle);
          pipe.uploaded = i + 1;
          pipe.changed.SignalAll();
        }
      });
      reader = std::thread([&] {
        for (int i = 0; i < count; ++i) {
          if (!pipe.WaitFor(&pipe.computed, i)) return;
          std::string handle;
          {
            absl::MutexLock lock(&pipe.mu);
            handle = pipe.c_handles[static_cast<size_t>(i)];
          }
          const TensorRows rows{rows_of(i), c_row_bytes, 0};
          absl::Status s =
              store_
                  .ReadInto(handle, rows,
                            absl::MakeSpan(out + i * block_rows * c_row_bytes,
                                           static_cast<size_t>(rows.data_bytes())),
                            {}, UploadConnections(rows.data_bytes(), rows.rows, stripes),
                            deadline - absl::Now(), /*first_connection=*/stripes)
                  .status();
          if (!s.ok()) {
            pipe.Fail(std::move(s), /*in_put=*/false);
            return;
          }
        }
      });

      // The blocks' Matmuls on a connection of their own, past the uploads' and the reads'.
      GemmClient calls(pool_->Channel(2 * stripes));
      for (int i = 0; i < count; ++i) {
        if (!pipe.WaitFor(&pipe.uploaded, i)) break;
        const int64_t row0 = i * block_rows;
        MatmulArgs inner = args;
        {
          absl::MutexLock lock(&pipe.mu);
          inner.a_ref = pipe.a_handles[static_cast<size_t>(i)];
        }
        inner.b_ref = b_handle;
        inner.keep_c = KeepResult{TtlFor(options.timeout), kLabel, /*temporary=*/true};
        inner.row_plan.emplace();
        inner.row_plan->set_rows(m);
        inner.row_plan->set_offset(row0);
        CallOptions one = options;
        one.stripes = 1;
        one.c_out = {};
        one.timeout = deadline - absl::Now();
        one.continues = temporaries.first();
        MatmulResult block;
        const absl::Time called = absl::Now();
        absl::Status s = calls.Matmul(inner, one, &block);
        steps.call += absl::Now() - called;
        if (s.ok()) temporaries.Add(block.info_.c_ref().handle());
        if (s.ok() && (!block.info_.has_row_plan() || block.info_.row_plan().rows() != m ||
                       block.info_.row_plan().offset() != row0)) {
          *unplanned = true;
          s = absl::FailedPreconditionError(
              "the server answered a row block without its row plan (it does not know them)");
        }
        const google::protobuf::RepeatedField<int64_t>& shape = block.info_.c().shape();
        if (s.ok() && (shape.size() != 2 || shape[0] != rows_of(i) || shape[1] != n)) {
          s = absl::InternalError(absl::StrCat("the block's C [", absl::StrJoin(shape, ","),
                                               "] is not its ", rows_of(i), " rows of C"));
        }
        if (!s.ok()) {
          pipe.Fail(std::move(s), /*in_put=*/false);
          break;
        }
        if (i == 0) first = block.info_;
        const gemm::v1::Timing& t = block.info_.timing();
        timing.set_queue_us(timing.queue_us() + t.queue_us());
        timing.set_copy_in_us(timing.copy_in_us() + t.copy_in_us());
        timing.set_compute_us(timing.compute_us() + t.compute_us());
        timing.set_copy_out_us(timing.copy_out_us() + t.copy_out_us());
        timing.set_total_us(timing.total_us() + t.total_us());
        absl::MutexLock lock(&pipe.mu);
        pipe.c_handles[static_cast<size_t>(i)] = block.info_.c_ref().handle();
        pipe.computed = i + 1;
        pipe.changed.SignalAll();
      }
      uploader.join();
      reader.join();
      absl::MutexLock lock(&pipe.mu);
      status = pipe.failed;
      if (pipe.failed_in_put) *put_failed = true;
    }
    if (status.ok()) {
      // As the one-connection call answers: C's shape and dtype, no handle, no plan; the
      // server's times are the blocks' together.
      result->info_ = std::move(first);
      result->info_.clear_c_ref();
      result->info_.clear_row_plan();
      result->info_.mutable_c()->clear_shape();
      result->info_.mutable_c()->add_shape(m);
      result->info_.mutable_c()->add_shape(n);
      timing.set_batch_size(1);
      *result->info_.mutable_timing() = timing;
      result->c_ = absl::string_view(out, c_bytes);
      steps.get = absl::Now() - start - steps.put - steps.call;
    }
    if (status.ok()) temporaries.Succeeded();
    cleanup_start = absl::Now();
  }
  if (!status.ok()) return status;
  steps.cleanup = absl::Now() - cleanup_start;
  result->striped_steps_ = steps;
  return status;
}

absl::Status StripedCall::Matmul(const MatmulArgs& args, const CallOptions& options,
                                 int stripes, MatmulResult* result) {
  CallOptions rest = options;
  if (const int blocks = RowBlocksFor(args, options); blocks >= 2) {
    const absl::Time start = absl::Now();
    bool put_failed = false;
    bool unplanned = false;
    absl::Status s =
        MatmulInBlocks(args, options, stripes, blocks, &put_failed, &unplanned, result);
    if (s.ok()) return s;
    rest.timeout = options.timeout - (absl::Now() - start);
    if (unplanned) {
      no_row_plans_.store(true, std::memory_order_relaxed);  // whole, from now on
    } else if (FallBack(s, put_failed, options)) {
      rest.stripes = 1;
      return plain_.Matmul(args, rest, result);
    } else {
      return s;
    }
  }
  return Run(
      args, rest, stripes, MatmulCBytes(args),
      [&args](const auto& put, MatmulArgs* inner) {
        absl::Status s = put(args.a, static_cast<int64_t>(args.a.data.size()), &inner->a_ref);
        if (s.ok()) s = put(args.b, static_cast<int64_t>(args.b.data.size()), &inner->b_ref);
        if (s.ok() && args.c) {
          s = put(*args.c, static_cast<int64_t>(args.c->data.size()), &inner->c_ref);
        }
        return s;
      },
      [this](const MatmulArgs& a, const CallOptions& o, MatmulResult* r) {
        return (o.continues.empty() ? plain_ : continuing_).Matmul(a, o, r);
      },
      result);
}

absl::Status StripedCall::QuantizedMatmul(const QuantizedMatmulArgs& args,
                                          const CallOptions& options, int stripes,
                                          MatmulResult* result) {
  return Run(
      args, options, stripes, QuantizedCBytes(args),
      [&args](const auto& put, QuantizedMatmulArgs* inner) {
        absl::Status s = absl::OkStatus();
        if (args.a) {
          s = put(*args.a, QuantizedBytes(*args.a), &inner->a_ref);
        } else if (args.a_dense) {
          s = put(*args.a_dense, static_cast<int64_t>(args.a_dense->data.size()), &inner->a_ref);
        }
        // An A now by handle is no longer inline (exactly one A is sent).
        if (!inner->a_ref.empty()) {
          inner->a.reset();
          inner->a_dense.reset();
        }
        if (s.ok()) s = put(args.b, QuantizedBytes(args.b), &inner->b_ref);
        return s;
      },
      [this](const QuantizedMatmulArgs& a, const CallOptions& o, MatmulResult* r) {
        return (o.continues.empty() ? plain_ : continuing_).QuantizedMatmul(a, o, r);
      },
      result);
}

}  // namespace gemmd
