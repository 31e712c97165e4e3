#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <cstdio>

#include "absl/status/status.h"
#include "client_cli/commands.h"

namespace gemmd {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int index) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Distinct arguments keep channels from sharing one subchannel (TCP connection).
  args.SetInt("gemmd.channel_index", index);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

std::string StatusCodeName(grpc::StatusCode code) {
  // gRPC's codes are the canonical ones absl names.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

int ReportRpcError(const std::string& what, const grpc::Status& status) {
  std::fprintf(stderr, "error: %s failed: %s: %s\n", what.c_str(),
               StatusCodeName(status.error_code()).c_str(), status.error_message().c_str());
  return 1;
}

}  // namespace gemmd
