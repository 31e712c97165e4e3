#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <cstdio>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client_cli/commands.h"
#include "client_cli/preflight.h"
#include "gemm/v1/gemm.grpc.pb.h"

namespace gemmd {

std::string StatusCodeName(grpc::StatusCode code) {
  // gRPC's codes are the canonical ones absl names.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

namespace {

// How this process's channels connect (set once by main).
bool tls_on = false;
bool client_certificate = false;

// Why a server may close a new connection without a word.
std::string ConnectionHint(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
      !absl::StrContains(status.error_message(), "Socket closed")) {
    return "";
  }
  if (!tls_on) {
    return " (the server closed the connection at once: it may speak TLS only; pass "
           "--tls_ca_file, and --tls_cert_file/--tls_key_file if it asks for a client "
           "certificate)";
  }
  return client_certificate
             ? " (the server refused the TLS handshake: it may not trust this client "
               "certificate, or not speak TLS)"
             : " (the server refused the TLS handshake: it may want a client certificate, "
               "--tls_cert_file and --tls_key_file, or not speak TLS)";
}

}  // namespace

void SetConnectionSecurity(const ChannelSecurity& security) {
  tls_on = security.tls;
  client_certificate = !security.cert_pem.empty();
}

int ReportRpcError(const std::string& what, const grpc::Status& status) {
  std::fprintf(stderr, "error: %s failed: %s: %s%s\n", what.c_str(),
               StatusCodeName(status.error_code()).c_str(), status.error_message().c_str(),
               ConnectionHint(status).c_str());
  return 1;
}

int ReportRpcError(const std::string& what, const absl::Status& status) {
  return ReportRpcError(what, grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                                           std::string(status.message())));
}

int ReportError(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Preflight(const CliOptions& o, bool quantized, grpc::Channel* channel,
              int64_t extra_results) {
  absl::StatusOr<RequestSize> size = quantized ? QuantizedRequestSize(o) : MatmulRequestSize(o);
  if (!size.ok()) return ReportError(size.status());
  size->client_bytes += extra_results * size->result_bytes;
  std::optional<ServerLimits> limits;
  if (channel != nullptr) {
    auto stub = gemm::v1::GemmService::NewStub(
        std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(o.timeout_s)));
    gemm::v1::ServerInfo info;
    const grpc::Status status = stub->GetServerInfo(&context, {}, &info);
    if (!status.ok()) return ReportRpcError("GetServerInfo (the server's limits)", status);
    limits = ServerLimits{info.limits().max_message_bytes(), info.limits().max_elements()};
  }
  if (absl::Status s = CheckRequestFits(*size, limits, AvailableMemoryBytes()); !s.ok()) {
    return ReportError(s);
  }
  return 0;
}

}  // namespace gemmd
