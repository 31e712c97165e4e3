#include "server/rpc/gemm_call_queues.h"

#include <algorithm>

namespace gemmd {
namespace {

void Poll(grpc::ServerCompletionQueue* queue) {
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) GemmCall::Proceed(tag, ok);
}

}  // namespace

GemmCallQueues::GemmCallQueues(const GemmCallEnvironment* env, const CallAuth* auth) {
  setup_.service = &service_;
  setup_.env = env;
  setup_.auth = auth;
}

GemmCallQueues::~GemmCallQueues() { Stop(); }

void GemmCallQueues::AddTo(grpc::ServerBuilder* builder, int threads) {
  builder->RegisterAsyncGenericService(&service_);
  for (int i = 0; i < std::max(1, threads); ++i) queues_.push_back(builder->AddCompletionQueue());
}

void GemmCallQueues::Start() {
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
    for (int i = 0; i < kWaitingCallsPerQueue; ++i) GemmCall::Await(&setup_, queue.get());
    pollers_.emplace_back(Poll, queue.get());
  }
}

void GemmCallQueues::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) queue->Shutdown();
  for (std::thread& poller : pollers_) poller.join();
  // Queues never polled (the server did not start) are emptied here.
  if (pollers_.empty()) {
    for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) Poll(queue.get());
  }
}

}  // namespace gemmd
