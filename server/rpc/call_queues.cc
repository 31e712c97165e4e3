#include "server/rpc/call_queues.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/observability/thread_name.h"

namespace gemmd {
namespace {

void Poll(grpc::ServerCompletionQueue* queue) {
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) static_cast<QueueTag*>(tag)->Proceed(ok);
}

}  // namespace

CallQueues::~CallQueues() { Stop(); }

void CallQueues::AddTo(grpc::ServerBuilder* builder, int threads) {
  builder->RegisterAsyncGenericService(&service_);
  for (int i = 0; i < std::max(1, threads); ++i) queues_.push_back(builder->AddCompletionQueue());
}

void CallQueues::Start(const std::function<void(grpc::ServerCompletionQueue*)>& await_more) {
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
    for (int i = 0; i < kWaitingCallsPerQueue; ++i) {
      QueuedCall::Await(&service_, queue.get(), router_);
    }
    if (await_more) await_more(queue.get());
    pollers_.emplace_back([queue = queue.get(), i = pollers_.size()] {
      NameThisThread(absl::StrCat("gemmd-cq", i));
      Poll(queue);
    });
  }
}

void CallQueues::Stop() {
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
