// What a lane does with a batch taken from its device, outside the batcher's lock: a
// last look (jobs whose caller gave up or whose deadline passed while the batch waited
// are answered, not run), the launches (ReadyToLaunch, where a stack's kernel is
// chosen), the device's run with its metrics, and the answers. Answering is gRPC work
// (responses are encoded as calls finish): a launch of a few jobs is answered on the
// lane, which saves waking a thread per launch; a larger one in slices on completion
// threads, so the lane goes back to its device sooner. Thread-safe.
#ifndef GEMMD_SERVER_SCHEDULING_LAUNCH_RUNNER_H_
#define GEMMD_SERVER_SCHEDULING_LAUNCH_RUNNER_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/devices/device.h"
#include "server/devices/kernel_catalogue.h"
#include "server/observability/clock.h"
#include "server/observability/metrics.h"
#include "server/scheduling/batch.h"
#include "server/scheduling/thread_pool.h"

namespace gemmd {

class LaunchRunner {
 public:
  // One launch's jobs as they came off the device, not yet answered.
  struct Ran {
    std::vector<std::unique_ptr<Job>> jobs;
    absl::Status status;
    JobResult result;  // queue is set per job when answered
    absl::Time started;
  };

  // `catalogue` (may be null: stacks then run job by job), `metrics` (may be null) and
  // `clock` (deadlines) must outlive the runner.
  LaunchRunner(const KernelCatalogue* catalogue, ServerMetrics* metrics, Clock* clock,
               int completion_threads);

  // Runs `batch` on lane `lane` of `device` (index `device_index` in metrics): answers
  // the jobs dropped at the last look now, returns the launches' outcomes. After a
  // launch fails the device runs nothing more: the rest fail with its status.
  std::vector<Ran> Run(Device* device, int device_index, int lane, Batch batch);
  // Answers every job of `ran` (its `done`, exactly once).
  void Answer(std::vector<Ran> ran);
  // Returns once every answer handed to the completion threads has run.
  void AwaitIdle() { completions_.AwaitIdle(); }

  // The first failure among `ran`, or OK.
  static absl::Status FirstFailure(const std::vector<Ran>& ran);

 private:
  Ran Launch(Device* device, int device_index, int lane, Batch batch, absl::Time started);

  const KernelCatalogue* const catalogue_;
  ServerMetrics* const metrics_;
  Clock* const clock_;
  ThreadPool completions_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_LAUNCH_RUNNER_H_
