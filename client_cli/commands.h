// gemm-cli's commands. Each returns the process exit status:
//   0 success, 1 RPC or input error (message on stderr), 2 server NOT_SERVING (health),
//   3 --verify found an error above the documented tolerance.
#ifndef GEMMD_CLIENT_CLI_COMMANDS_H_
#define GEMMD_CLIENT_CLI_COMMANDS_H_

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"

#include "client_cli/cli_options.h"

namespace gemmd {

int RunInfo(const CliOptions& options);
int RunHealth(const CliOptions& options);
int RunMatmul(const CliOptions& options);
int RunQuantized(const CliOptions& options);
int RunBench(const CliOptions& options);
// Resident tensors (tensor_commands.cc).
int RunPut(const CliOptions& options);
int RunGet(const CliOptions& options);
int RunRm(const CliOptions& options);
int RunLs(const CliOptions& options);

// Prints "error: CODE: message" to stderr and returns 1. A connection the server closed at
// once (gRPC says only "Socket closed") is usually a TLS mismatch: the message then says
// which flags may be missing, for the security the command was run with
// (SetConnectionSecurity).
int ReportRpcError(const std::string& what, const grpc::Status& status);
void SetConnectionSecurity(const ChannelSecurity& security);
int ReportRpcError(const std::string& what, const absl::Status& status);
// Prints "error: message" to stderr and returns 1.
int ReportError(const absl::Status& status);

// What a command that sends a request checks first (preflight.h): the request's size against the
// server's limits (one GetServerInfo on `channel`; none with --local, when `channel` is null) and
// this machine's memory. `extra_results` more responses are held at once (bench: concurrency - 1).
// Returns 0 when all is well, else the exit status after printing why.
int Preflight(const CliOptions& options, bool quantized, grpc::Channel* channel,
              int64_t extra_results = 0);

std::string StatusCodeName(grpc::StatusCode code);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_COMMANDS_H_
