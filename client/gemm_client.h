// gemmd's C++ client: the documented way for a C++ program to call the service.
//
// Operands are sent from the caller's memory as it is: the request goes to gRPC as
// slices that reference each tensor's bytes, after a small serialized header, so no
// tensor is copied into a protobuf message or a serialized string. C is received with
// one copy, into a buffer the caller owns (CallOptions::c_out) or one the result owns.
// The bytes on the wire are standard protobuf (gemm.v1, proto/gemm/v1/gemm.proto): any
// gemmd server, and any server of that API, understands them.
//
//   auto channel = gemmd::ConnectChannel("127.0.0.1:50051");
//   gemmd::GemmClient client(channel);
//   gemmd::MatmulArgs args;
//   args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT32, {a_bytes, m * k * 4}};
//   args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, {b_bytes, k * n * 4}};
//   gemmd::MatmulResult result;
//   absl::Status s = client.Matmul(args, {}, &result);  // result.c(): C's bytes
//
// A GemmClient made with a ConnectionPool sends a big call over several connections
// (CallOptions::stripes; client/striped_call.h); a small one takes one. A caller
// on the server's machine can put operands and C in shared memory instead
// (client/shared_memory.h; RegionSliceRef): a call that names a region goes on one
// connection and carries no tensor bytes.
//
// Errors are the server's gRPC status as an absl::Status (same code and message; the
// codes are listed in docs/ARCHITECTURE.md), or INVALID_ARGUMENT from the client when C
// does not fit c_out, or INTERNAL when the response is not a MatmulResponse.
// Thread-safe: one GemmClient may run any number of calls at once.
#ifndef GEMMD_CLIENT_GEMM_CLIENT_H_
#define GEMMD_CLIENT_GEMM_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/channel_security.h"
#include "gemm/v1/gemm.pb.h"

namespace gemmd {
namespace wire {
class ByteRuns;
}  // namespace wire

// Bytes [offset, offset + bytes) of a shared-memory region registered with the server
// (client/shared_memory.h): an operand or C there goes by name, not over the wire.
struct RegionSliceRef {
  std::string region;  // the name it was registered under; empty = not in a region
  int64_t offset = 0;
  int64_t bytes = 0;
  bool set() const { return !region.empty(); }
};
// The slice as gemm.proto's RegionSlice.
void ToProto(const RegionSliceRef& slice, gemm::v1::RegionSlice* out);

// A tensor in the caller's memory: row-major little-endian bytes of `shape` x `dtype`.
// Referenced, not copied: it must stay valid until the call returns (or, for the async
// calls, until `done` runs). With `shm` set its bytes are read from that region slice
// instead, and `data` is ignored.
struct TensorRef {
  std::vector<int64_t> shape;
  gemm::v1::DataType dtype = gemm::v1::DATA_TYPE_FLOAT32;
  absl::string_view data;
  RegionSliceRef shm;
};

// A quantized tensor [rows, K] in the caller's memory (formats: gemm.proto's QuantFormat).
struct QuantizedTensorRef {
  std::vector<int64_t> shape;
  gemm::v1::QuantFormat format = gemm::v1::QUANT_FORMAT_NVFP4;
  absl::string_view data;
  absl::string_view scales;
  float tensor_scale = 1.0f;  // NVFP4
  RegionSliceRef data_shm, scales_shm;  // set: read from the region instead
};

// Keep C on the server as a resident tensor (MatmulArgs::keep_c): the result then has
// C's handle in info().c_ref() and its shape and dtype in info().c(), but no C bytes.
struct KeepResult {
  uint32_t ttl_s = 0;  // 0 = until deleted
  std::string label;
  bool temporary = false;  // part of a call of several RPCs (PutOptions::temporary)
};

// C = alpha * op(A) * op(B) + beta * C (gemm.proto's MatmulRequest).
struct MatmulArgs {
  TensorRef a, b;
  std::optional<TensorRef> c;  // needed when beta != 0
  // Operands by handle (resident tensors, tensor_store_client.h): a non-empty ref is
  // sent instead of its inline tensor, which is then ignored and not sent.
  std::string a_ref, b_ref, c_ref;
  std::optional<KeepResult> keep_c;
  // Set: C is written into this region slice (exactly C's size); the result then has
  // C's shape and dtype in info().c() and no C bytes.
  RegionSliceRef c_shm;
  // Unset alpha = 1. An FP64 product takes them as they are; the other precisions
  // round them to FP32 (on the server).
  std::optional<double> alpha;
  double beta = 0.0;
  bool transpose_a = false;
  bool transpose_b = false;
  gemm::v1::Precision precision = gemm::v1::PRECISION_AUTO;
  gemm::v1::DataType output_dtype = gemm::v1::DATA_TYPE_UNSPECIFIED;
  std::string kernel;  // force one by name; empty = the server chooses
  // Set: A is rows [offset, offset + M) of a product of `rows` rows, computed with that
  // product's bits (gemm.proto's MatmulRequest.row_plan; the answer echoes it).
  std::optional<gemm::v1::RowPlan> row_plan;
};

// C[M,N] = dequant(A) * dequant(B)^T (gemm.proto's QuantizedMatmulRequest): A quantized
// (`a`), dense (`a_dense`, weight-only) or resident (`a_ref`, either kind), exactly one
// of them; B inline (`b`) or resident (`b_ref`, a quantized tensor; `b` then ignored).
struct QuantizedMatmulArgs {
  std::optional<QuantizedTensorRef> a;
  std::optional<TensorRef> a_dense;
  std::string a_ref;
  QuantizedTensorRef b;
  std::string b_ref;
  std::string kernel;
  std::optional<KeepResult> keep_c;
  RegionSliceRef c_shm;  // as in MatmulArgs
};

struct CallOptions {
  absl::Duration timeout = absl::Seconds(60);
  // Where C goes (it must hold C); empty = a buffer the result owns.
  absl::Span<char> c_out;
  // Connections the call's bytes go over, for a GemmClient with a ConnectionPool
  // (client/striped_call.h): 0 = the client's choice (the default: several for a call
  // that moves kStripeCallBytes or more, its large operands and C striped; one below);
  // 1 = one connection; N >= 2 = N, every inline operand and C striped whatever their
  // size. Without a pool a call always goes over one connection.
  int stripes = 0;
  // Bytes of tensor data per TensorChunk message when the call stripes an operand (0 =
  // kStripeChunkBytes, 2 MiB).
  int64_t stripe_chunk_bytes = 0;
  // Row blocks a striped Matmul that can go in blocks is sent in (client/striped_call.h):
  // 0 = the client's choice (kDefaultRowBlocks: whole, today), 1 = whole, N = up to N
  // (each of at least kRowPlanAlign rows).
  int row_blocks = 0;
  // A temporary of the call of several RPCs this one belongs to (PutOptions::continues).
  std::string continues;
};

// Where a striped call's time went, as the client saw it (client/striped_call.h): the
// steps add up to the call. In row blocks, put is B and A's first block, call the blocks'
// Matmuls, and get the rest (C's blocks read while A's next ones went up).
struct StripedSteps {
  absl::Duration put;      // the large operands put as temporaries
  absl::Duration call;     // the Matmul (or QuantizedMatmul) that names them
  absl::Duration get;      // C read back (zero when C rode in the call's answer)
  absl::Duration cleanup;  // the temporaries deleted
  int row_blocks = 1;      // the blocks A went in (1: whole)
};

// A call's answer: everything the server said, and C's bytes.
class MatmulResult {
 public:
  // c's shape and dtype (its data empty), kernel, device, timing, precision.
  const gemm::v1::MatmulResponse& info() const { return info_; }
  // C's bytes, in CallOptions::c_out or in a buffer this result owns; empty when C was
  // kept on the server (keep_c: its handle is info().c_ref().handle()) or written into a
  // region (c_shm).
  absl::string_view c() const { return c_; }
  // A call that went striped (and was not made again on one connection): its steps.
  const std::optional<StripedSteps>& striped_steps() const { return striped_steps_; }

 private:
  friend class StripedCall;
  friend absl::Status ReadMatmulResponse(const wire::ByteRuns& runs, absl::Span<char> c_out,
                                         bool c_in_region, MatmulResult* result);
  gemm::v1::MatmulResponse info_;
  std::unique_ptr<char[]> owned_;
  absl::string_view c_;
  std::optional<StripedSteps> striped_steps_;
};

// A server, or a deployment of replicas, to call: any gRPC target URI ("host:port",
// "ipv4:A:PORT,B:PORT", "dns:///NAME:PORT") and how to secure the calls
// (client/channel_security.h; plaintext by default). A plain string converts to one.
struct Endpoint {
  Endpoint(std::string t) : target(std::move(t)) {}  // NOLINT: implicit by design
  Endpoint(const char* t) : target(t) {}             // NOLINT
  Endpoint(std::string t, ChannelSecurity s) : target(std::move(t)), security(std::move(s)) {}
  std::string target;
  ChannelSecurity security;
};

class ConnectionPool;
class StripedCall;

class GemmClient {
 public:
  // Calls over `channel`; with a pool, large ones over its connections too (striped).
  explicit GemmClient(std::shared_ptr<grpc::ChannelInterface> channel,
                      std::shared_ptr<ConnectionPool> pool = nullptr);
  // ConnectChannel(endpoint) for the calls, and a pool of connections
  // ConnectChannel(endpoint, 1 + i) for the striped ones.
  explicit GemmClient(const Endpoint& endpoint);

  // Blocking calls.
  absl::Status Matmul(const MatmulArgs& args, const CallOptions& options, MatmulResult* result);
  absl::Status QuantizedMatmul(const QuantizedMatmulArgs& args, const CallOptions& options,
                               MatmulResult* result);

  // How many connections a call with these arguments goes over (CallOptions::stripes).
  int StripesFor(const MatmulArgs& args, const CallOptions& options) const;
  int StripesFor(const QuantizedMatmulArgs& args, const CallOptions& options) const;

  // Callback calls: `done` runs once, on a gRPC thread (a thread of its own for a striped
  // call), when the call is over and gRPC no longer references the operands; `result` is
  // filled by then.
  void MatmulAsync(const MatmulArgs& args, const CallOptions& options, MatmulResult* result,
                   std::function<void(absl::Status)> done);
  void QuantizedMatmulAsync(const QuantizedMatmulArgs& args, const CallOptions& options,
                            MatmulResult* result, std::function<void(absl::Status)> done);

 private:
  std::shared_ptr<grpc::ChannelInterface> channel_;
  grpc::GenericStub stub_;
  std::shared_ptr<StripedCall> striped_;  // null: no pool, every call on channel_
};

// A channel to `endpoint`. Calls are balanced over all of its addresses (round_robin),
// kept off servers whose health says NOT_SERVING, and retried on UNAVAILABLE
// (client/channel_config.h); they carry its token, over TLS when it says so. No message
// size limit on this side (the server enforces its own); gemmd's transport settings
// (proto/transport_arguments.h), with `extra` gRPC arguments on top. Channels with
// different `index` use separate TCP connections.
std::shared_ptr<grpc::Channel> ConnectChannel(
    const Endpoint& endpoint, int index = 0,
    const std::vector<std::pair<std::string, int>>& extra = {});

}  // namespace gemmd

#endif  // GEMMD_CLIENT_GEMM_CLIENT_H_
