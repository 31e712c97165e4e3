// One call made of several RPCs (a striped call: its operands put as temporary tensors,
// the GEMM by handle, C read back in ranges, the temporaries deleted): the RPCs after
// its first carry the metadata `gemmd-continues: HANDLE`, naming a temporary tensor the
// call made (TensorHeader.temporary). A server that starts draining serves those RPCs
// as it serves calls already accepted, so the call in flight ends as a one-RPC call
// would; a new call, or one naming anything else, is refused as usual. Thread-safe.
#ifndef GEMMD_SERVER_RPC_CALL_CONTINUATION_H_
#define GEMMD_SERVER_RPC_CALL_CONTINUATION_H_

#include <grpcpp/server_context.h>

#include <string>

#include "proto/call_metadata.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// Whether the call's metadata names a live temporary tensor of `tenant` in `store`
// (null: no store, never).
bool ContinuesACall(const grpc::ServerContextBase& context, TensorStore* store,
                    const std::string& tenant);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_CALL_CONTINUATION_H_
