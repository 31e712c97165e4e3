#include "server/scheduling/batch_queues.h"

#include <algorithm>
#include <utility>

namespace gemmd {

bool BatchQueues::Push(std::unique_ptr<Job> job, int64_t bytes, absl::Time now) {
  KeyQueue& queue = queues_[BatchKeyOf(*job)];
  const bool batchable = IsBatchable(*job);
  queue.jobs.push_back({std::move(job), now, next_seq_++, bytes});
  queue.bytes += bytes;
  ++jobs_;
  bytes_ += bytes;
  return queue.jobs.size() == 1 || !batchable || queue.jobs.size() >= options_.max_batch_size ||
         queue.bytes >= options_.max_batch_bytes;
}

bool BatchQueues::Ready(const KeyQueue& queue, absl::Time now) const {
  return queue.jobs.size() >= options_.max_batch_size ||
         queue.bytes >= options_.max_batch_bytes ||
         now >= queue.jobs.front().enqueued + options_.max_queue_delay ||
         !IsBatchable(*queue.jobs.front().job);
}

const BatchKey* BatchQueues::NextReady(absl::Time now, bool go, absl::Time* next_due) const {
  const BatchKey* best = nullptr;
  uint64_t best_seq = 0;
  *next_due = absl::InfiniteFuture();
  for (const auto& [key, queue] : queues_) {
    if (queue.jobs.empty()) continue;
    const Queued& head = queue.jobs.front();
    if (!go && !Ready(queue, now)) {
      *next_due = std::min(*next_due, head.enqueued + options_.max_queue_delay);
    } else if (best == nullptr || head.seq < best_seq) {
      best = &key;
      best_seq = head.seq;
    }
  }
  return best;
}

FormedBatch BatchQueues::Take(const BatchKey& ready, absl::Time now,
                              std::vector<DroppedJob>* dropped) {
  // A copy: `ready` may be the map's own key, which goes with its queue below.
  const BatchKey key = ready;
  FormedBatch formed;
  auto it = queues_.find(key);
  if (it == queues_.end()) return formed;
  KeyQueue& queue = it->second;
  Batch& batch = formed.batch;
  int64_t rows = 0;
  const bool quantized_stack = key.stacked && key.quantized;
  while (!queue.jobs.empty() && batch.jobs.size() < options_.max_batch_size) {
    Queued& head = queue.jobs.front();
    const bool batchable = IsBatchable(*head.job);
    if (!batch.jobs.empty() &&
        (!batchable || formed.bytes + head.bytes > options_.max_batch_bytes ||
         (quantized_stack &&
          rows + StackedRows(*head.job) > options_.max_stacked_quantized_rows))) {
      break;
    }
    Queued q = std::move(head);
    queue.jobs.pop_front();
    queue.bytes -= q.bytes;
    --jobs_;
    bytes_ -= q.bytes;
    if (absl::Status reason = DropReason(*q.job, now); !reason.ok()) {
      dropped->push_back({std::move(q.job), std::move(reason)});
      continue;
    }
    formed.bytes += q.bytes;
    formed.flops += q.job->problem.Flops();
    if (key.stacked) rows += StackedRows(*q.job);
    batch.jobs.push_back(std::move(q.job));
    if (!batchable) break;
  }
  if (queue.jobs.empty()) queues_.erase(it);
  if (batch.jobs.empty()) return formed;
  batch.stacked = key.stacked && batch.jobs.size() > 1;
  if (batch.stacked) {
    batch.problem = StackedProblem(batch.jobs);
    if (key.quantized) batch.stacked_quantized = StackedQuantized(batch.jobs);
    if (batch.jobs.front()->kernel_forced) batch.kernel = batch.jobs.front()->kernel;
  } else {
    batch.problem = PackedProblem(batch.jobs);
  }
  return formed;
}

void BatchQueues::TakeAll(const absl::Status& status, std::vector<DroppedJob>* dropped) {
  for (auto& [key, queue] : queues_) {
    for (Queued& q : queue.jobs) dropped->push_back({std::move(q.job), status});
  }
  queues_.clear();
  jobs_ = 0;
  bytes_ = 0;
}

size_t BatchQueues::CancelledWaiting() const {
  size_t cancelled = 0;
  for (const auto& [key, queue] : queues_) {
    for (const Queued& q : queue.jobs) {
      if (q.job->is_cancelled && q.job->is_cancelled()) ++cancelled;
    }
  }
  return cancelled;
}

}  // namespace gemmd
