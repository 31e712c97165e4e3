#include "proto/transport_arguments.h"

#include <grpc/grpc.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gemmd {

absl::StatusOr<GrpcArgs> ParseGrpcArgs(absl::string_view spec) {
  GrpcArgs args;
  if (spec.empty()) return args;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    int value = 0;
    if (kv.first.empty() || !absl::SimpleAtoi(kv.second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--grpc_arg: '", item, "' is not NAME=INTEGER (e.g. grpc.http2.max_frame_size=1048576)"));
    }
    args.emplace_back(std::string(kv.first), value);
  }
  return args;
}

void SetTransportArguments(grpc::ChannelArguments* args, const GrpcArgs& extra) {
  args->SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, kTcpReadChunkBytes);
  args->SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, kHttp2WriteBufferBytes);
  for (const auto& [name, value] : extra) args->SetInt(name, value);
}

void SetTransportArguments(grpc::ServerBuilder* builder, const GrpcArgs& extra) {
  builder->AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, kTcpReadChunkBytes);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, kHttp2WriteBufferBytes);
  for (const auto& [name, value] : extra) builder->AddChannelArgument(name, value);
}

}  // namespace gemmd
