// gRPC transport settings every gemmd endpoint uses (gemm-server, the C++ client's
// channels, grpc-floor), chosen by measurement (docs/BENCHMARKS.md, "Transport"): each is
// kept only because a benchmark showed its gain.
//   - TCP reads of up to 1 MiB at once (gRPC starts at 8 KiB and grows slowly): a
//     128 KiB request arrives in one read instead of many, each a system call and often a
//     thread wake-up.
//   - An HTTP/2 write buffer of 1 MiB, so a response leaves in few writes.
// BDP probing stays on (gRPC's default): it grows the flow-control window for large
// messages.
#ifndef GEMMD_PROTO_TRANSPORT_ARGUMENTS_H_
#define GEMMD_PROTO_TRANSPORT_ARGUMENTS_H_

#include <grpc/grpc.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

namespace gemmd {

inline constexpr int kTcpReadChunkBytes = 1 << 20;
inline constexpr int kHttp2WriteBufferBytes = 1 << 20;

inline void SetTransportArguments(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, kTcpReadChunkBytes);
  args->SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, kHttp2WriteBufferBytes);
}

inline void SetTransportArguments(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, kTcpReadChunkBytes);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, kHttp2WriteBufferBytes);
}

}  // namespace gemmd

#endif  // GEMMD_PROTO_TRANSPORT_ARGUMENTS_H_
