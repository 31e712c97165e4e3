// Many GEMMs on one MatmulStream (gemm.proto): the way to send small calls at a rate
// one unary call per GEMM cannot reach. Each request is submitted with a callback (or
// waited on as a future), goes out in a stream message that references the caller's
// tensors (no copy, as GemmClient's calls): alone, or in one batch with the requests
// submitted while the last message was being sent (gemm.proto's StreamRequest.batch),
// so many outstanding requests cost fewer messages. Each is answered on its own as it
// completes, in any order, with its own status: one failed request ends nothing.
//
//   gemmd::MatmulStream stream(gemmd::ConnectChannel("127.0.0.1:50051"));
//   for (...) stream.Submit(args[i], {}, &results[i], [](absl::Status s) { ... });
//   absl::Status s = stream.Close();  // every request answered; the stream's status
//
// At most `max_outstanding` requests are unanswered at once: Submit waits for room.
// A request's `done` runs once, on a gRPC thread, when its answer has been read (or the
// stream ended without one) and gRPC has let go of its operands: from then on they may
// be freed. A stream that ends with requests unanswered (the server drained, the
// connection broke, the stream's deadline passed) fails them: UNAVAILABLE when the
// server ended the stream OK without answering them (send them again), otherwise the
// stream's status. Submits after the end fail at once with the same.
// Thread-safe: any number of threads may Submit on one stream.
#ifndef GEMMD_CLIENT_MATMUL_STREAM_H_
#define GEMMD_CLIENT_MATMUL_STREAM_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/gemm_client.h"

namespace gemmd {

struct StreamOptions {
  // Requests sent and not yet answered; Submit waits while this many are.
  int max_outstanding = 64;
  // The whole stream's deadline (its requests' too).
  absl::Duration timeout = absl::InfiniteDuration();
};

// One request's options.
struct StreamCallOptions {
  // The server answers DEADLINE_EXCEEDED once this has passed since it read the request
  // (zero: only the stream's deadline).
  absl::Duration timeout = absl::ZeroDuration();
  // Where C goes (it must hold C); empty = a buffer the result owns.
  absl::Span<char> c_out;
};

class MatmulStream {
 public:
  // Opens the stream on `channel` (its first request goes out when submitted).
  explicit MatmulStream(std::shared_ptr<grpc::ChannelInterface> channel,
                        const StreamOptions& options = {});
  // Close(), then waits until every request's `done` has run.
  ~MatmulStream();
  MatmulStream(const MatmulStream&) = delete;
  MatmulStream& operator=(const MatmulStream&) = delete;

  // Sends one request; `result` is filled before `done` runs. The arguments' tensors
  // (and c_out) must stay valid until then. Blocks while max_outstanding are unanswered.
  void Submit(const MatmulArgs& args, const StreamCallOptions& options, MatmulResult* result,
              std::function<void(absl::Status)> done);
  void Submit(const QuantizedMatmulArgs& args, const StreamCallOptions& options,
              MatmulResult* result, std::function<void(absl::Status)> done);
  // The same, waited on through a future.
  std::future<absl::Status> Submit(const MatmulArgs& args, const StreamCallOptions& options,
                                   MatmulResult* result);
  std::future<absl::Status> Submit(const QuantizedMatmulArgs& args,
                                   const StreamCallOptions& options, MatmulResult* result);

  // Tells the server no more requests come, waits until every request is answered, its
  // `done` has returned and the stream has ended, and returns the stream's status (OK: it
  // ended cleanly, though a request may still have failed on its own). Later calls
  // return the same. Not from a request's `done` (nor is the destructor): it would wait
  // for that `done` to return.
  absl::Status Close();

  // Requests sent and not yet answered.
  int outstanding() const;

 private:
  class Call;
  std::shared_ptr<Call> call_;
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_MATMUL_STREAM_H_
