// Where the service hands accepted jobs (the dynamic batcher; tests use fakes).
#ifndef GEMMD_SERVER_SCHEDULING_JOB_EXECUTOR_H_
#define GEMMD_SERVER_SCHEDULING_JOB_EXECUTOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "server/scheduling/job.h"

namespace gemmd {

class JobExecutor {
 public:
  virtual ~JobExecutor() = default;

  // OK: the executor took *job (now null) and will call its `done` exactly once.
  // RESOURCE_EXHAUSTED (queue full) or UNAVAILABLE (draining): the job was not taken and
  // stays in *job, its `done` never called; the caller answers the request itself.
  virtual absl::Status Submit(std::unique_ptr<Job>* job) = 0;

  // Whether a call arriving now may read its request, with `arriving` others already
  // doing so: UNAVAILABLE (draining, no healthy device) or RESOURCE_EXHAUSTED (the queue
  // is full, or max_queue_size calls are already arriving). Lets the service refuse a
  // call before reading its request. Submit still decides; the state may change between.
  virtual absl::Status CheckRoom(int64_t /*arriving*/) const { return absl::OkStatus(); }

  // Stops taking jobs, finishes every job already taken, then returns. Idempotent.
  virtual void Drain() = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_JOB_EXECUTOR_H_
