// Metadata keys of the API beyond its messages, shared by the server and the clients.
#ifndef GEMMD_PROTO_CALL_METADATA_H_
#define GEMMD_PROTO_CALL_METADATA_H_

namespace gemmd {

// Sent by the RPCs of one call made of several (a striped call) after its first: the
// handle of a temporary tensor that call made (TensorHeader.temporary). A draining
// server serves such RPCs to the call's end (server/rpc/call_continuation.h).
inline constexpr char kContinuesMetadata[] = "gemmd-continues";

}  // namespace gemmd

#endif  // GEMMD_PROTO_CALL_METADATA_H_
