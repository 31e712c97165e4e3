// The completion queues Matmul and QuantizedMatmul calls are served on (gemm_call.h): the
// async generic service, one queue per poller thread, and each queue's calls waiting for
// the next to arrive. The pollers never wait for a GEMM: a call's work goes to the job
// executor and its answer back to the queue.
//
// Order of life: AddTo before the server is built, Start once it is, Stop after the
// server's Shutdown has returned (gRPC needs the queues polled until every call it
// holds is over); Stop runs on destruction too (a server that never started included).
#ifndef GEMMD_SERVER_RPC_GEMM_CALL_QUEUES_H_
#define GEMMD_SERVER_RPC_GEMM_CALL_QUEUES_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <thread>
#include <vector>

#include "server/rpc/gemm_call.h"

namespace gemmd {

class GemmCallQueues {
 public:
  // Calls waiting on each queue at once (each one's arrival posts the next).
  static constexpr int kWaitingCallsPerQueue = 64;

  // `env` and `auth` outlive the queues.
  GemmCallQueues(const GemmCallEnvironment* env, const CallAuth* auth);
  ~GemmCallQueues();
  GemmCallQueues(const GemmCallQueues&) = delete;
  GemmCallQueues& operator=(const GemmCallQueues&) = delete;

  // Registers the service and `threads` queues (at least 1) with `builder`.
  void AddTo(grpc::ServerBuilder* builder, int threads);
  // Starts the pollers, each with kWaitingCallsPerQueue calls waiting.
  void Start();
  // Shuts the queues down and waits for the pollers to empty them. Idempotent.
  void Stop();

 private:
  grpc::AsyncGenericService service_;
  GemmCallSetup setup_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> pollers_;
  bool stopped_ = false;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_CALL_QUEUES_H_
