// The small GemmService messages (handles, listings, server info) between protobuf and
// the raw bytes gRPC hands the service. The service takes every method raw so that a
// request protobuf cannot parse is answered INVALID_ARGUMENT with a reason, counted and
// logged like any failed call (the generated handlers answer it before the service
// sees it, without either). Thread-safe (pure functions).
#ifndef GEMMD_SERVER_RPC_RAW_MESSAGES_H_
#define GEMMD_SERVER_RPC_RAW_MESSAGES_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemmd {

// Larger than any handle, listing request or info request a client sends.
inline constexpr int64_t kMaxSmallRequestBytes = 64 << 10;

// INVALID_ARGUMENT naming the message type when `bytes` is over kMaxSmallRequestBytes or
// does not parse (malformed, or a string field that is not UTF-8).
absl::Status ParseSmallRequest(const grpc::ByteBuffer& bytes, google::protobuf::MessageLite* out);

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_RAW_MESSAGES_H_
