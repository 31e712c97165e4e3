// What the resident-tensor calls of one server share (PutTensor, GetTensor); owned by
// the service, outlives its calls.
#ifndef GEMMD_SERVER_RPC_TENSOR_CALL_ENVIRONMENT_H_
#define GEMMD_SERVER_RPC_TENSOR_CALL_ENVIRONMENT_H_

#include <memory>

#include "absl/time/time.h"
#include "server/observability/metrics.h"
#include "server/rpc/call_registry.h"
#include "server/rpc/call_report.h"
#include "server/rpc/host_memory.h"
#include "server/regions/region_table.h"
#include "server/rpc/tenant_budget.h"
#include "server/store/tensor_store.h"

namespace gemmd {

class UploadWatch;

struct TensorCallEnvironment {
  TensorStore* store = nullptr;  // null: the server keeps no resident tensors
  // Downloads copying from device memory hold their chunks here (--max_inflight_bytes),
  // and in the tenant's share (--tenant_max_inflight_bytes). Shared: a chunk gRPC
  // still holds may outlive the call.
  std::shared_ptr<HostMemory> memory;
  std::shared_ptr<TenantBudget> tenant_budget;
  CallRegistry* registry = nullptr;
  const CallReporter* reporter = nullptr;
  ServerMetrics* metrics = nullptr;
  // Ends uploads that have sent nothing for a while (--upload_idle_timeout_s).
  UploadWatch* upload_watch = nullptr;
  // Downloads copy their chunks even where resident memory is host memory (the path a GPU
  // takes), for measuring it on the CPU backend (--download_copies).
  bool copy_downloads = false;
  // Shared-memory regions a chunk's bytes may lie in (null: none).
  const RegionTable* regions = nullptr;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_CALL_ENVIRONMENT_H_
