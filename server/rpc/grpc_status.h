// The one place absl::Status becomes grpc::Status (the RPC boundary). Thread-safe.
#ifndef GEMMD_SERVER_RPC_GRPC_STATUS_H_
#define GEMMD_SERVER_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace gemmd {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GRPC_STATUS_H_
