// Where the service hands accepted jobs: today a FIFO in front of the devices, later the
// dynamic batcher (same interface).
#ifndef GEMMD_SERVER_JOB_EXECUTOR_H_
#define GEMMD_SERVER_JOB_EXECUTOR_H_

#include <memory>

#include "absl/status/status.h"
#include "server/job.h"

namespace gemmd {

class JobExecutor {
 public:
  virtual ~JobExecutor() = default;

  // OK: the executor owns the job and will call its `done` exactly once.
  // RESOURCE_EXHAUSTED (queue full) or UNAVAILABLE (draining): the job was not taken,
  // `done` will never be called, and the caller answers the request itself.
  virtual absl::Status Submit(std::unique_ptr<Job> job) = 0;

  // What Submit would answer for a job of `problem` right now, without taking it: lets a
  // caller refuse before it allocates (QuantizedMatmul dequantizes into new buffers).
  // Submit still decides; the state may change in between.
  virtual absl::Status CheckAdmission(const GemmProblem& problem) const {
    return absl::OkStatus();
  }

  // Stops taking jobs, finishes every job already taken, then returns. Idempotent.
  virtual void Drain() = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_JOB_EXECUTOR_H_
