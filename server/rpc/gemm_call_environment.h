// What every GEMM request of a server shares, whichever RPC carries it (gemm_call.h,
// matmul_stream_call.h); owned by the service, outlives its calls.
#ifndef GEMMD_SERVER_RPC_GEMM_CALL_ENVIRONMENT_H_
#define GEMMD_SERVER_RPC_GEMM_CALL_ENVIRONMENT_H_

#include <atomic>
#include <cstdint>

#include "server/observability/metrics.h"
#include "server/rpc/call_registry.h"
#include "server/rpc/call_report.h"
#include "server/rpc/gemm_request.h"
#include "server/rpc/tenant_budget.h"
#include "server/scheduling/job_executor.h"
#include "server/scheduling/thread_pool.h"

namespace gemmd {

struct GemmCallEnvironment {
  GemmRequestContext request;  // limits, the backend's kernel catalogue, the memory cap
  JobExecutor* executor = nullptr;
  ServerMetrics* metrics = nullptr;
  CallRegistry* registry = nullptr;
  const CallReporter* reporter = nullptr;
  // Calls admitted at their headers whose job is not yet queued (JobExecutor::CheckRoom
  // bounds them), so a crowd of callers is refused before their requests are read.
  std::atomic<int64_t>* arriving = nullptr;
  // Host memory per tenant (--tenant_max_inflight_bytes).
  TenantBudget* tenant_budget = nullptr;
  // Where requests larger than prepare_inline_max_bytes are prepared (payload copies,
  // dequantization), so the completion-queue poller that read them goes back to other
  // calls; smaller ones are prepared on that thread, where a hop would cost more than
  // the work. -1 (or no pool): every request on the pollers.
  ThreadPool* preparers = nullptr;
  int64_t prepare_inline_max_bytes = int64_t{1} << 20;
  // Requests one MatmulStream may have read and not yet answered; past it the stream
  // reads no more (HTTP/2 flow control then holds its sender back).
  int stream_max_outstanding = 256;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_CALL_ENVIRONMENT_H_
