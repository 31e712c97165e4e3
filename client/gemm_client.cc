#include "client/gemm_client.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/slice.h>

#include <atomic>
#include <thread>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/channel_config.h"
#include "client/connection_pool.h"
#include "client/striped_call.h"
#include "proto/call_metadata.h"
#include "proto/proto_types.h"
#include "proto/transport_arguments.h"
#include "proto/wire/gemm_wire.h"

namespace gemmd {
namespace {

// C arrives in many slices (one per HTTP/2 frame); a large one is copied into its buffer
// by a few threads, since one core's memcpy is slower than the connection delivers.
constexpr size_t kParallelCopyBytes = size_t{8} << 20;
constexpr int kCopyThreads = 4;

void CopyRuns(const wire::ByteRuns& runs, char* out) {
  if (runs.size() < kParallelCopyBytes) {
    runs.CopyTo(out);
    return;
  }
  // Runs split into kCopyThreads groups of about equal bytes, each copied by one thread.
  const std::vector<absl::string_view>& all = runs.runs();
  const size_t share = (runs.size() + kCopyThreads - 1) / kCopyThreads;
  std::vector<std::thread> threads;
  size_t first = 0, bytes = 0, at = 0, group_at = 0;
  auto copy = [&all, out](size_t from, size_t to, size_t offset) {
    for (size_t i = from; i < to; ++i) {
      std::memcpy(out + offset, all[i].data(), all[i].size());
      offset += all[i].size();
    }
  };
  for (size_t i = 0; i < all.size(); ++i) {
    bytes += all[i].size();
    at += all[i].size();
    if (bytes >= share && i + 1 < all.size()) {
      threads.emplace_back(copy, first, i + 1, group_at);
      first = i + 1;
      group_at = at;
      bytes = 0;
    }
  }
  copy(first, all.size(), group_at);
  for (std::thread& t : threads) t.join();
}

}  // namespace

// One call in flight. It lives until both the call has completed and gRPC has let go of
// every slice that references the caller's operands; only then does `done` run, so the
// caller may free or reuse its buffers as soon as it is told the call is over.
class GemmCallState {
 public:
  // `c_in_region`: the request sent C to a region (its response carries no C bytes).
  GemmCallState(const CallOptions& options, MatmulResult* result,
                std::function<void(absl::Status)> done, bool c_in_region = false)
      : c_out_(options.c_out),
        c_in_region_(c_in_region),
        result_(result),
        done_(std::move(done)) {
    context_.emplace();
    context_->set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
    if (!options.continues.empty()) context_->AddMetadata(kContinuesMetadata, options.continues);
  }

  void Start(grpc::GenericStub* stub, const std::string& method,
             const wire::EncodedMessage& message) {
    std::vector<grpc::Slice> slices;
    slices.reserve(message.pieces().size());
    for (const wire::EncodedMessage::Piece& piece : message.pieces()) {
      if (!piece.is_payload) {
        slices.emplace_back(piece.owned);  // tags, lengths and small fields: copied
        continue;
      }
      refs_.fetch_add(1, std::memory_order_relaxed);
      // gRPC only reads through it; the release callback says when it has finished.
      slices.emplace_back(const_cast<char*>(piece.payload.data()), piece.payload.size(),
                          &GemmCallState::ReleasePayload, this);
    }
    request_ = grpc::ByteBuffer(slices.data(), slices.size());
    slices.clear();
    stub->UnaryCall(&*context_, method, grpc::StubOptions(), &request_, &response_,
                    [this](grpc::Status status) { Completed(status); });
  }

 private:
  static void ReleasePayload(void* state) { static_cast<GemmCallState*>(state)->Unref(); }

  void Completed(const grpc::Status& status) {
    request_.Clear();
    status_ = status.ok() ? ReadResponse()
                          : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                         status.error_message());
    response_.Clear();
    // The call is over, but gRPC may still hold the request's payload slices: the retry
    // layer keeps a copy of a message it might send again until the call is destroyed,
    // and a call that ended before it was committed (its deadline passed first) is
    // destroyed only with its context. Waiting for the slices with the context alive
    // would wait forever (`gemm-cli matmul --timeout_s 0.005` hung in 7 of 15 runs), so
    // the context goes now; gRPC's own reference keeps the call until this returns.
    context_.reset();
    Unref();
  }

  absl::Status ReadResponse() {
    std::vector<grpc::Slice> slices;
    if (!response_.Dump(&slices).ok()) {
      return absl::InternalError("could not read the server's response");
    }
    wire::ByteRuns runs;
    for (const grpc::Slice& s : slices) {
      runs.Append(absl::string_view(reinterpret_cast<const char*>(s.begin()), s.size()));
    }
    wire::MatmulResponseWire parsed;
    if (absl::Status s = wire::ParseMatmulResponse(runs, &parsed); !s.ok()) {
      return absl::InternalError(s.message());
    }
    const size_t bytes = parsed.c_data.size();
    if (!parsed.head.c_ref().handle().empty()) {
      // C stayed on the server (keep_c): the response describes it and carries no bytes.
      if (bytes != 0) {
        return absl::InternalError("the response has both C's handle and C's bytes");
      }
      result_->info_ = std::move(parsed.head);
      result_->c_ = absl::string_view();
      return absl::OkStatus();
    }
    if (c_in_region_ && bytes == 0) {  // C is in the caller's region slice
      result_->info_ = std::move(parsed.head);
      result_->c_ = absl::string_view();
      return absl::OkStatus();
    }
    const std::optional<DataType> type = DataTypeFromProto(parsed.head.c().dtype());
    int64_t elements = 1;
    for (int64_t d : parsed.head.c().shape()) elements *= d;
    if (!type || static_cast<size_t>(elements) * DataTypeSize(*type) != bytes) {
      return absl::InternalError(absl::StrCat(
          "the response's C has ", bytes, " bytes, which does not match its shape and dtype"));
    }
    char* out = nullptr;
    if (!c_out_.empty()) {
      if (c_out_.size() < bytes) {
        return absl::InvalidArgumentError(absl::StrCat("C is ", bytes, " bytes; c_out holds ",
                                                       c_out_.size()));
      }
      out = c_out_.data();
    } else {
      result_->owned_.reset(new char[bytes > 0 ? bytes : 1]);  // uninitialized: written below
      out = result_->owned_.get();
    }
    CopyRuns(parsed.c_data, out);
    result_->info_ = std::move(parsed.head);
    result_->c_ = absl::string_view(out, bytes);
    return absl::OkStatus();
  }

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::function<void(absl::Status)> done = std::move(done_);
    const absl::Status status = std::move(status_);
    delete this;
    done(status);
  }

  std::optional<grpc::ClientContext> context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  const absl::Span<char> c_out_;
  const bool c_in_region_;
  MatmulResult* const result_;
  std::function<void(absl::Status)> done_;
  absl::Status status_;
  std::atomic<int> refs_{1};  // the call's completion, plus one per payload slice
};

namespace {

const std::string kMatmulMethod = "/gemm.v1.GemmService/Matmul";
const std::string kQuantizedMatmulMethod = "/gemm.v1.GemmService/QuantizedMatmul";

void SetTensorHead(const TensorRef& t, gemm::v1::Tensor* out) {
  for (int64_t d : t.shape) out->add_shape(d);
  out->set_dtype(t.dtype);
  if (t.shm.set()) ToProto(t.shm, out->mutable_shm());
}

void SetQuantizedHead(const QuantizedTensorRef& t, gemm::v1::QuantizedTensor* out) {
  for (int64_t d : t.shape) out->add_shape(d);
  out->set_format(t.format);
  out->set_tensor_scale(t.tensor_scale);
  if (t.data_shm.set()) ToProto(t.data_shm, out->mutable_data_shm());
  if (t.scales_shm.set()) ToProto(t.scales_shm, out->mutable_scales_shm());
}

// The bytes that go inline: none for a tensor in a region.
absl::string_view Inline(const TensorRef& t) { return t.shm.set() ? absl::string_view() : t.data; }
absl::string_view InlineData(const QuantizedTensorRef& t) {
  return t.data_shm.set() ? absl::string_view() : t.data;
}
absl::string_view InlineScales(const QuantizedTensorRef& t) {
  return t.scales_shm.set() ? absl::string_view() : t.scales;
}

bool UsesRegions(const MatmulArgs& args) {
  return args.a.shm.set() || args.b.shm.set() || (args.c && args.c->shm.set()) ||
         args.c_shm.set();
}

bool UsesRegions(const QuantizedMatmulArgs& args) {
  auto quantized = [](const QuantizedTensorRef& t) {
    return t.data_shm.set() || t.scales_shm.set();
  };
  return (args.a && quantized(*args.a)) || (args.a_dense && args.a_dense->shm.set()) ||
         quantized(args.b) || args.c_shm.set();
}

void SetKeep(const std::optional<KeepResult>& keep, gemm::v1::ResidentResult* out) {
  out->set_ttl_s(keep->ttl_s);
  out->set_label(keep->label);
  out->set_temporary(keep->temporary);
}

// An operand goes by handle or inline, never both: the encoder sends a tensor's bytes
// only when its head is set.
wire::EncodedMessage EncodeMatmul(const MatmulArgs& args) {
  gemm::v1::MatmulRequest head;
  if (!args.a_ref.empty()) {
    head.mutable_a_ref()->set_handle(args.a_ref);
  } else {
    SetTensorHead(args.a, head.mutable_a());
  }
  if (!args.b_ref.empty()) {
    head.mutable_b_ref()->set_handle(args.b_ref);
  } else {
    SetTensorHead(args.b, head.mutable_b());
  }
  if (!args.c_ref.empty()) {
    head.mutable_c_ref()->set_handle(args.c_ref);
  } else if (args.c) {
    SetTensorHead(*args.c, head.mutable_c());
  }
  if (args.keep_c) SetKeep(args.keep_c, head.mutable_keep_c());
  if (args.c_shm.set()) ToProto(args.c_shm, head.mutable_c_shm());
  if (args.alpha) head.set_alpha(*args.alpha);
  head.set_beta(args.beta);
  head.set_transpose_a(args.transpose_a);
  head.set_transpose_b(args.transpose_b);
  head.set_precision(args.precision);
  head.set_output_dtype(args.output_dtype);
  head.set_kernel(args.kernel);
  return wire::EncodeMatmulRequest(head, Inline(args.a), Inline(args.b),
                                   args.c ? Inline(*args.c) : absl::string_view());
}

wire::EncodedMessage EncodeQuantized(const QuantizedMatmulArgs& args) {
  gemm::v1::QuantizedMatmulRequest head;
  wire::QuantizedPayloads payloads;
  if (!args.a_ref.empty()) {
    head.mutable_a_ref()->set_handle(args.a_ref);
  } else if (args.a) {
    SetQuantizedHead(*args.a, head.mutable_a());
    payloads.a_data = InlineData(*args.a);
    payloads.a_scales = InlineScales(*args.a);
  } else if (args.a_dense) {
    SetTensorHead(*args.a_dense, head.mutable_a_dense());
    payloads.a_dense_data = Inline(*args.a_dense);
  }
  if (!args.b_ref.empty()) {
    head.mutable_b_ref()->set_handle(args.b_ref);
  } else {
    SetQuantizedHead(args.b, head.mutable_b());
    payloads.b_data = InlineData(args.b);
    payloads.b_scales = InlineScales(args.b);
  }
  head.set_kernel(args.kernel);
  if (args.keep_c) SetKeep(args.keep_c, head.mutable_keep_c());
  if (args.c_shm.set()) ToProto(args.c_shm, head.mutable_c_shm());
  return wire::EncodeQuantizedMatmulRequest(head, payloads);
}

// A QuantizedMatmul sends exactly one A.
absl::Status CheckOneA(const QuantizedMatmulArgs& args) {
  if (int{args.a.has_value()} + int{args.a_dense.has_value()} + int{!args.a_ref.empty()} != 1) {
    return absl::InvalidArgumentError(
        "QuantizedMatmulArgs needs exactly one of a, a_dense and a_ref");
  }
  return absl::OkStatus();
}

absl::Status Wait(const std::function<void(std::function<void(absl::Status)>)>& start) {
  absl::Notification finished;
  absl::Status status;
  start([&](absl::Status s) {
    status = std::move(s);
    finished.Notify();
  });
  finished.WaitForNotification();
  return status;
}

}  // namespace

void ToProto(const RegionSliceRef& slice, gemm::v1::RegionSlice* out) {
  out->set_region(slice.region);
  out->set_offset(slice.offset);
  out->set_bytes(slice.bytes);
}

GemmClient::GemmClient(std::shared_ptr<grpc::ChannelInterface> channel,
                       std::shared_ptr<ConnectionPool> pool)
    : channel_(channel), stub_(channel) {
  if (pool != nullptr) striped_ = std::make_shared<StripedCall>(channel, std::move(pool));
}

GemmClient::GemmClient(const Endpoint& endpoint)
    : GemmClient(ConnectChannel(endpoint), std::make_shared<ConnectionPool>(endpoint)) {}

// A call with a region moves few bytes over the wire: one connection.
int GemmClient::StripesFor(const MatmulArgs& args, const CallOptions& options) const {
  return striped_ && !UsesRegions(args) ? striped_->StripesFor(args, options) : 1;
}

int GemmClient::StripesFor(const QuantizedMatmulArgs& args, const CallOptions& options) const {
  return striped_ && !UsesRegions(args) ? striped_->StripesFor(args, options) : 1;
}

void GemmClient::MatmulAsync(const MatmulArgs& args, const CallOptions& options,
                             MatmulResult* result, std::function<void(absl::Status)> done) {
  if (const int stripes = StripesFor(args, options); stripes > 1) {
    // Its steps block: a thread of its own, holding what it uses.
    std::thread([striped = striped_, args, options, stripes, result, done = std::move(done)] {
      done(striped->Matmul(args, options, stripes, result));
    }).detach();
    return;
  }
  (new GemmCallState(options, result, std::move(done), args.c_shm.set()))
      ->Start(&stub_, kMatmulMethod, EncodeMatmul(args));
}

void GemmClient::QuantizedMatmulAsync(const QuantizedMatmulArgs& args, const CallOptions& options,
                                      MatmulResult* result,
                                      std::function<void(absl::Status)> done) {
  if (absl::Status s = CheckOneA(args); !s.ok()) {
    done(std::move(s));
    return;
  }
  if (const int stripes = StripesFor(args, options); stripes > 1) {
    std::thread([striped = striped_, args, options, stripes, result, done = std::move(done)] {
      done(striped->QuantizedMatmul(args, options, stripes, result));
    }).detach();
    return;
  }
  (new GemmCallState(options, result, std::move(done), args.c_shm.set()))
      ->Start(&stub_, kQuantizedMatmulMethod, EncodeQuantized(args));
}

absl::Status GemmClient::Matmul(const MatmulArgs& args, const CallOptions& options,
                                MatmulResult* result) {
  if (const int stripes = StripesFor(args, options); stripes > 1) {
    return striped_->Matmul(args, options, stripes, result);
  }
  return Wait([&](std::function<void(absl::Status)> done) {
    MatmulAsync(args, options, result, std::move(done));
  });
}

absl::Status GemmClient::QuantizedMatmul(const QuantizedMatmulArgs& args,
                                         const CallOptions& options, MatmulResult* result) {
  if (absl::Status s = CheckOneA(args); !s.ok()) return s;
  if (const int stripes = StripesFor(args, options); stripes > 1) {
    return striped_->QuantizedMatmul(args, options, stripes, result);
  }
  return Wait([&](std::function<void(absl::Status)> done) {
    QuantizedMatmulAsync(args, options, result, std::move(done));
  });
}

std::shared_ptr<grpc::Channel> ConnectChannel(const Endpoint& endpoint, int index,
                                             const std::vector<std::pair<std::string, int>>& extra) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Distinct arguments keep channels from sharing one subchannel (TCP connection).
  args.SetInt("gemmd.channel_index", index);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  SetBalancingArguments(&args);
  SetSecurityArguments(endpoint.security, &args);
  SetTransportArguments(&args, extra);
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      endpoint.target, ChannelCredentialsFor(endpoint.security), args,
      TokenInterceptors(endpoint.security));
}

}  // namespace gemmd
