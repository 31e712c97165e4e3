#include "client/striped_call.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/striped_call_internal.h"

namespace gemmd {

namespace striped_internal {

int64_t ElementBytes(gemm::v1::DataType type) {
  switch (type) {
    case gemm::v1::DATA_TYPE_FLOAT16:
    case gemm::v1::DATA_TYPE_BFLOAT16:
      return 2;
    case gemm::v1::DATA_TYPE_INT8:
      return 1;
    case gemm::v1::DATA_TYPE_FLOAT64:
      return 8;
    default:  // FLOAT32 (and UNSPECIFIED, which means it), INT32
      return 4;
  }
}

gemm::v1::DataType OutputDtype(const MatmulArgs& args) {
  if (args.output_dtype != gemm::v1::DATA_TYPE_UNSPECIFIED) return args.output_dtype;
  const bool fp64 =
      args.precision == gemm::v1::PRECISION_FP64 ||
      (args.precision == gemm::v1::PRECISION_AUTO && args.a.dtype == gemm::v1::DATA_TYPE_FLOAT64);
  return fp64 ? gemm::v1::DATA_TYPE_FLOAT64 : gemm::v1::DATA_TYPE_FLOAT32;
}

int64_t MatmulCBytes(const MatmulArgs& args) {
  if (!args.a_ref.empty() || !args.b_ref.empty()) return -1;
  const std::vector<int64_t>& a = args.a.shape;
  const std::vector<int64_t>& b = args.b.shape;
  if (a.size() < 2 || a.size() > 3 || b.size() < 2 || b.size() > 3) return -1;
  const int64_t m = args.transpose_a ? a[a.size() - 1] : a[a.size() - 2];
  const int64_t n = args.transpose_b ? b[b.size() - 2] : b[b.size() - 1];
  const int64_t batch = std::max(a.size() == 3 ? a[0] : 1, b.size() == 3 ? b[0] : 1);
  if (m < 1 || n < 1 || batch < 1) return -1;
  return batch * m * n * ElementBytes(OutputDtype(args));
}

uint32_t TtlFor(absl::Duration timeout) {
  const int64_t s = absl::ToInt64Seconds(absl::Ceil(timeout, absl::Seconds(1)));
  return static_cast<uint32_t>(std::clamp<int64_t>(s, 1, 24 * 3600));
}

}  // namespace striped_internal

namespace {

using striped_internal::ElementBytes;
using striped_internal::kLabel;
using striped_internal::MatmulCBytes;
using striped_internal::TtlFor;

// How long deleting the temporaries may take: on its own clock, since a failed call may
// have used up its deadline.
constexpr absl::Duration kDeleteTimeout = absl::Seconds(5);

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

// Deleted whatever happened; a delete that fails leaves the TTL to do it.
StripedCall::Temporaries::~Temporaries() {
  absl::MutexLock lock(&mu_);  // every other user is done
  if (handles_.empty()) return;
  if (succeeded_) {
    owner_->DeleteLater(std::move(handles_));
  } else {
    owner_->continuing_store_.DeleteTensors(handles_, kDeleteTimeout).IgnoreError();
  }
}

void StripedCall::Temporaries::Add(std::string handle) {
  absl::MutexLock lock(&mu_);
  handles_.push_back(std::move(handle));
}

std::string StripedCall::Temporaries::first() const {
  absl::MutexLock lock(&mu_);
  return handles_.empty() ? std::string() : handles_.front();
}

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

// Row blocks (striped_row_blocks.cc) open dense temporaries too.
template absl::StatusOr<TensorStoreClient::OpenedTensor> StripedCall::OpenTemporary<TensorRef>(
    const TensorRef&, const CallOptions&, int, absl::Time, const std::string&, Temporaries*);

absl::StatusOr<char*> StripedCall::BufferForC(const CallOptions& options, size_t bytes,
                                              MatmulResult* result) {
  if (!options.c_out.empty()) {
    if (options.c_out.size() < bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("C is ", bytes, " bytes; c_out holds ", options.c_out.size()));
    }
    return options.c_out.data();
  }
  result->owned_.reset(new char[bytes > 0 ? bytes : 1]);
  return result->owned_.get();
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
  absl::StatusOr<char*> buffer = BufferForC(options, bytes, result);
  if (!buffer.ok()) return buffer.status();
  char* const out = *buffer;
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
