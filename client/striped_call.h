// Big calls over several connections. One HTTP/2 connection carries a fraction of what
// TCP can (docs/BENCHMARKS.md, "Striped calls"), so a call whose operands and result are
// large moves them over the client's ConnectionPool instead, with today's API:
//   1. each large inline operand is put as a temporary resident tensor, in row parts
//      (PutTensor parts), all on one device: the operands are opened one after another,
//      then every part of every operand sent at once, each on its own pool connection
//      (the first operand's part i on connection i, the next operand's after those);
//   2. the Matmul (or QuantizedMatmul) names them by handle, sends the small operands
//      inline, and keeps a large C on the server (keep_c);
//   3. C is read back in row ranges, range i on connection i, straight into the caller's
//      buffer (GetTensor row ranges);
//   4. the temporaries are deleted, all at once.
// C is bit-identical to the one-connection call's: the server computes the same product
// from the same bytes; only where the bytes travel differs (when neither call shares its
// launch with others: docs/ARCHITECTURE.md, "Numerics"). A step that fails fails the
// call with the server's status, and the temporaries made so far are deleted (after a call
// that succeeded, without waiting: the StripedCall's destructor waits). They carry a
// TTL of the call's timeout too, so a client that dies mid-call leaks nothing past it (an
// unfinished part upload goes sooner: the server drops it), and they count against the
// caller's tenant quota like any resident tensor.
//
// A Matmul whose A is big enough may go in row blocks instead (CallOptions::row_blocks;
// the blocks' bytes overlap on the wire): A and B inline and rank 2, A not transposed,
// beta 0, B and C large enough to stripe, and at least two blocks of kRowPlanAlign rows.
// B and A's first block are put;
// then three stages run at once, each in block order: a thread puts A's next blocks (on
// connections [0, stripes)); as each arrives, a Matmul by handle with a row plan
// (MatmulRequest.row_plan: the whole product's kernel and K split, so C's bits are the
// whole call's) keeps its C (on connection 2 * stripes); a thread reads each C back into
// its rows of the caller's C (on connections [stripes, 2 * stripes): a connection's
// transport works on one thing at a time, so reads do not wait behind uploads). A server
// that answers without the plan (it does not know it) gets the call whole, and no call in
// blocks again.
//
// Every connection must reach one server process. A call that finds otherwise (a host
// name with several addresses) marks the pool spread and is made again on one connection.
// So is a call the client chose to stripe (CallOptions::stripes 0) whose operands the
// server cannot keep: a server without a tensor store (then no call to it is striped
// again) or one whose store or tenant quota has no room for them now.
// Thread-safe.
#ifndef GEMMD_CLIENT_STRIPED_CALL_H_
#define GEMMD_CLIENT_STRIPED_CALL_H_

#include <grpcpp/channel.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/connection_pool.h"
#include "client/gemm_client.h"
#include "client/tensor_store_client.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

// A call goes striped (CallOptions::stripes = 0) when the bytes it moves (inline operands
// and C, where the client can tell C's size) are at least kStripeCallBytes, and then
// over kDefaultStripes connections; within it, an operand or C goes striped when it is
// at least kStripeOperandBytes (a smaller one rides in the Matmul itself).
inline constexpr int64_t kStripeCallBytes = int64_t{32} << 20;
inline constexpr int64_t kStripeOperandBytes = int64_t{4} << 20;
// Tensor data per upload message of a striped operand, unless CallOptions says otherwise:
// half of PutOptions' default, so the server copies one message of a part to the device
// while the next arrives (measured against 4 MiB in docs/BENCHMARKS.md).
inline constexpr int64_t kStripeChunkBytes = int64_t{2} << 20;
inline constexpr int kDefaultStripes = 8;
inline constexpr int kMaxStripes = kMaxUploadConnections;
// A Matmul that can go in row blocks goes in this many unless CallOptions says otherwise:
// whole. Over loopback the blocks measured slower (docs/BENCHMARKS.md, "Striped calls in
// row blocks"): both ends' gRPC threads, not the wire, bound the bytes a second, so
// moving A's blocks up while C's come down gains nothing, and each block's RPCs cost CPU.
// Blocks are for a link where each direction has its own capacity.
inline constexpr int kDefaultRowBlocks = 1;
inline constexpr int kMaxRowBlocks = 64;

class StripedCall {
 public:
  // Calls over `channel`, parts over `pool`'s connections.
  StripedCall(std::shared_ptr<grpc::ChannelInterface> channel,
              std::shared_ptr<ConnectionPool> pool);
  // Waits for the deletes of its calls' temporaries still in flight.
  ~StripedCall();

  // How many connections a call goes over (1: not striped), for CallOptions::stripes.
  int StripesFor(const MatmulArgs& args, const CallOptions& options) const;
  int StripesFor(const QuantizedMatmulArgs& args, const CallOptions& options) const;

  // The call over `stripes` (>= 2) connections, as above; the result as GemmClient's.
  absl::Status Matmul(const MatmulArgs& args, const CallOptions& options, int stripes,
                      MatmulResult* result);
  absl::Status QuantizedMatmul(const QuantizedMatmulArgs& args, const CallOptions& options,
                               int stripes, MatmulResult* result);

 private:
  // The temporaries of one call: put, then deleted when it ends (striped_call_internal.h).
  class Temporaries;

  // Either kind of call: put_operands(put, &inner) puts the operands worth striping (with
  // put(tensor, bytes, &ref)), then Finish; made again on one connection when FallBack
  // says so. `call` is the one-connection call of that kind.
  template <typename Args, typename PutOperands, typename Call>
  absl::Status Run(const Args& args, const CallOptions& options, int stripes, int64_t c_bytes,
                   const PutOperands& put_operands, const Call& call, MatmulResult* result);
  // Opens `tensor` (dense or quantized) as one of the call's temporaries (its parts over
  // `stripes` connections, not sent yet), on `device` (empty: the server's choice),
  // continuing the call's first temporary; the handle is added to *temporaries.
  template <typename Tensor>
  absl::StatusOr<TensorStoreClient::OpenedTensor> OpenTemporary(const Tensor& tensor,
                                                                const CallOptions& options,
                                                                int stripes, absl::Time deadline,
                                                                const std::string& device,
                                                                Temporaries* temporaries);
  // Steps 2-4 for either kind of call, once the operands are in: `call` runs the call
  // itself (keep_c set when `stripe_c`), by `deadline`; the call's and the read's times
  // go in *steps.
  template <typename Args, typename Call>
  absl::Status Finish(Args inner, const CallOptions& options, absl::Time deadline, int stripes,
                      bool stripe_c, Temporaries* temporaries, const Call& call,
                      StripedSteps* steps, MatmulResult* result);
  int Decide(int64_t call_bytes, int requested) const;
  // The row blocks a striped Matmul goes in (1: whole), as the comment above says; these
  // two are in striped_row_blocks.cc.
  int RowBlocksFor(const MatmulArgs& args, const CallOptions& options) const;
  // Where C's `bytes` are read to: the caller's CallOptions::c_out (INVALID_ARGUMENT when
  // it is too small), or a buffer *result owns, left uninitialized.
  static absl::StatusOr<char*> BufferForC(const CallOptions& options, size_t bytes,
                                          MatmulResult* result);
  // The Matmul in `blocks` row blocks over `stripes` connections. *put_failed: B or a
  // block of A could not be put; *unplanned: the server answered without the row plan
  // (then nothing of C is trusted).
  absl::Status MatmulInBlocks(const MatmulArgs& args, const CallOptions& options, int stripes,
                              int blocks, bool* put_failed, bool* unplanned, MatmulResult* result);
  // Whether a striped call that ended with `status` is made again on one connection:
  // when its parts reached two server processes (the pool is then marked spread), and,
  // for the client's own choice of stripes (CallOptions::stripes 0), when the server
  // could not keep its operands (no tensor store, or no room in it).
  bool FallBack(const absl::Status& status, bool put_failed, const CallOptions& options);
  // Deletes a finished call's temporaries without waiting (counted in deletes_).
  void DeleteLater(std::vector<std::string> handles);

  // Deletes sent and not yet answered: shared with their callbacks, which may end after
  // the destructor's wait does.
  struct PendingDeletes {
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu) = 0;
  };

  std::shared_ptr<ConnectionPool> pool_;
  GemmClient plain_;  // the one-connection calls: the fallback
  TensorStoreClient store_;
  // The RPCs that continue a call (after its first temporary), on the pool's first
  // connection: the caller's channel stops sending once a draining server says
  // NOT_SERVING, and the pool's does not (ConnectionPool).
  GemmClient continuing_;
  TensorStoreClient continuing_store_;
  std::atomic<bool> no_store_{false};  // the server keeps no temporaries: never again
  std::atomic<bool> no_row_plans_{false};  // the server ignores row plans: never again
  const std::shared_ptr<PendingDeletes> deletes_ = std::make_shared<PendingDeletes>();
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_STRIPED_CALL_H_
