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
#include "client/request_encoding.h"
#include "client/striped_call.h"
#include "proto/call_metadata.h"
#include "proto/proto_types.h"
#include "proto/transport_arguments.h"
#include "proto/wire/gemm_wire.h"

namespace gemmd {

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
    return ReadMatmulResponse(runs, c_out_, c_in_region_, result_);
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
      ->Start(&stub_, kMatmulMethod, EncodeMatmulArgs(args));
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
      ->Start(&stub_, kQuantizedMatmulMethod, EncodeQuantizedArgs(args));
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
