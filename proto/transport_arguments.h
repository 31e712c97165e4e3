// gRPC transport settings every gemmd endpoint uses (gemm-server, the C++ client's
// channels, grpc-floor), chosen by measurement (docs/BENCHMARKS.md, "Transport"): each is
// kept only because a benchmark showed its gain.
//   - TCP reads of up to 1 MiB at once (gRPC starts at 8 KiB and grows slowly): a
//     128 KiB request arrives in one read instead of many, each a system call and often a
//     thread wake-up.
//   - An HTTP/2 write buffer of 1 MiB, so a response leaves in few writes.
// BDP probing stays on (gRPC's default): it grows the flow-control window for large
// messages. Further integer arguments may be given by name (--grpc_arg), to measure
// others; they override these.
#ifndef GEMMD_PROTO_TRANSPORT_ARGUMENTS_H_
#define GEMMD_PROTO_TRANSPORT_ARGUMENTS_H_

#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemmd {

inline constexpr int kTcpReadChunkBytes = 1 << 20;
inline constexpr int kHttp2WriteBufferBytes = 1 << 20;

// gRPC channel arguments with integer values, e.g. {"grpc.http2.max_frame_size", 1 << 20}.
using GrpcArgs = std::vector<std::pair<std::string, int>>;

// "name=value[,name=value...]" (empty = none). INVALID_ARGUMENT naming the item that is
// not NAME=INTEGER.
absl::StatusOr<GrpcArgs> ParseGrpcArgs(absl::string_view spec);

void SetTransportArguments(grpc::ChannelArguments* args, const GrpcArgs& extra = {});
void SetTransportArguments(grpc::ServerBuilder* builder, const GrpcArgs& extra = {});

}  // namespace gemmd

#endif  // GEMMD_PROTO_TRANSPORT_ARGUMENTS_H_
