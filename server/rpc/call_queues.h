// The completion queues every call of the server is served on (queued_call.h): the async
// generic service, one queue per poller thread, and each queue's calls waiting for the
// next to arrive. The pollers never wait for a GEMM: a call's work goes to the job
// executor and its answer back to the queue.
//
// Order of life: AddTo before the server is built, Start once it is, Stop after the
// server's Shutdown has returned (gRPC needs the queues polled until every call it
// holds is over); Stop runs on destruction too (a server that never started included).
#ifndef GEMMD_SERVER_RPC_CALL_QUEUES_H_
#define GEMMD_SERVER_RPC_CALL_QUEUES_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/server_builder.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "server/rpc/queued_call.h"

namespace gemmd {

class CallQueues {
 public:
  // Calls waiting on each queue at once (each one's arrival posts the next).
  static constexpr int kWaitingCallsPerQueue = 64;

  // `router` outlives the queues.
  explicit CallQueues(CallRouter* router) : router_(router) {}
  ~CallQueues();
  CallQueues(const CallQueues&) = delete;
  CallQueues& operator=(const CallQueues&) = delete;

  // Registers the service and `threads` queues (at least 1) with `builder`.
  void AddTo(grpc::ServerBuilder* builder, int threads);
  // Starts the pollers, each with kWaitingCallsPerQueue calls waiting, and whatever
  // `await_more` posts on each queue (calls of methods registered apart: their events
  // are QueueTags too).
  void Start(const std::function<void(grpc::ServerCompletionQueue*)>& await_more = nullptr);
  // Shuts the queues down and waits for the pollers to empty them. Idempotent.
  void Stop();

 private:
  CallRouter* const router_;
  grpc::AsyncGenericService service_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> pollers_;
  bool stopped_ = false;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_CALL_QUEUES_H_
