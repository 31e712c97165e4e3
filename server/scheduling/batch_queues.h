// The jobs waiting for a launch: one queue per batch key (batch.h), which queue's batch
// goes next, and what that batch takes (docs/ARCHITECTURE.md, "Batching and placement").
//
// A key's queue is ready when it holds max_batch_size jobs or max_batch_bytes, when its
// oldest job has waited max_queue_delay, when its head must run alone, or whenever the
// caller says so (a device idle with nothing arriving, a drain). Among ready queues the
// one whose head came first goes. A batch takes jobs in arrival order up to
// max_batch_size, the byte cap (a lone job may exceed it: admission checked it) and, for
// a stack of QuantizedMatmuls, max_stacked_quantized_rows; a job that must run alone
// goes alone. Not thread-safe: the Batcher's lock guards it.
#ifndef GEMMD_SERVER_SCHEDULING_BATCH_QUEUES_H_
#define GEMMD_SERVER_SCHEDULING_BATCH_QUEUES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/scheduling/batch.h"
#include "server/scheduling/job.h"

namespace gemmd {

class BatchQueues {
 public:
  struct Options {
    uint32_t max_batch_size = 64;
    absl::Duration max_queue_delay = absl::Microseconds(100);
    int64_t max_batch_bytes = std::numeric_limits<int64_t>::max();
    int64_t max_stacked_quantized_rows = 64;
  };

  explicit BatchQueues(Options options) : options_(options) {}

  // Queues `job`, which holds `bytes` (JobBytes), as arrived at `now`. True when the
  // dispatcher should look again: its queue is new (a new due time), now ready, or its
  // job must run alone. A job joining a queue still filling changes nothing: the
  // dispatcher already sleeps until that queue's head is due.
  bool Push(std::unique_ptr<Job> job, int64_t bytes, absl::Time now);

  // The key of the ready queue whose head came first, or null. `go`: every queue with
  // jobs is ready. *next_due: when the earliest queue not ready comes due (InfiniteFuture
  // when none).
  const BatchKey* NextReady(absl::Time now, bool go, absl::Time* next_due) const;

  // Takes the next batch from `key`'s queue (one NextReady returned). Jobs DropReason
  // refuses at `now` go to *dropped instead; the batch is empty when every job taken was
  // dropped. Its problem is the packed one, or for a stack of several jobs the stacked
  // one (with the kernel the jobs forced; otherwise the lane chooses it, ReadyToLaunch).
  // `key` may be the one NextReady returned, which an emptied queue takes with it.
  FormedBatch Take(const BatchKey& key, absl::Time now, std::vector<DroppedJob>* dropped);

  // Empties every queue into *dropped, each job with `status`.
  void TakeAll(const absl::Status& status, std::vector<DroppedJob>* dropped);

  size_t jobs() const { return jobs_; }
  int64_t bytes() const { return bytes_; }  // what the waiting jobs hold
  // Waiting jobs whose caller has given up (Take will drop them).
  size_t CancelledWaiting() const;

 private:
  struct Queued {
    std::unique_ptr<Job> job;
    absl::Time enqueued;
    uint64_t seq = 0;  // arrival order (times can tie)
    int64_t bytes = 0;
  };
  struct KeyQueue {
    std::deque<Queued> jobs;
    int64_t bytes = 0;
  };

  bool Ready(const KeyQueue& queue, absl::Time now) const;

  const Options options_;
  absl::flat_hash_map<BatchKey, KeyQueue> queues_;
  size_t jobs_ = 0;
  int64_t bytes_ = 0;
  uint64_t next_seq_ = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_BATCH_QUEUES_H_
