// One GetTensor call: a resident tensor streamed back as TensorChunks (the header, then
// the data, then the scales, at most 2 MiB each: a default client takes them), read from the device one chunk at a
// time as gRPC takes the previous one. The tensor stays pinned until the call ends, so
// a delete meanwhile does not cut the stream short. Owns itself.
#ifndef GEMMD_SERVER_RPC_TENSOR_DOWNLOAD_CALL_H_
#define GEMMD_SERVER_RPC_TENSOR_DOWNLOAD_CALL_H_

#include <grpcpp/support/server_callback.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "server/observability/metrics.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// The header GetTensor and ListTensors report for a tensor.
gemm::v1::TensorHeader HeaderOf(const TensorSpec& spec, absl::Time expires,
                                const std::string& label, absl::Time now);

class TensorDownloadCall final : public grpc::ServerWriteReactor<gemm::v1::TensorChunk> {
 public:
  // Answers `status` at once when it is not OK (then `pin` is null).
  // `tenant`: the caller's, for the metrics.
  TensorDownloadCall(TensorPin pin, const absl::Status& status, ServerMetrics* metrics,
                     std::string tenant = "");

  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  ~TensorDownloadCall() override = default;
  // Writes the next chunk, or finishes when all went.
  void Next();

  TensorPin pin_;
  ServerMetrics* const metrics_;
  const std::string tenant_;
  const absl::Time started_;
  gemm::v1::TensorChunk chunk_;
  int64_t data_sent_ = 0;
  int64_t scales_sent_ = 0;
  absl::StatusCode code_ = absl::StatusCode::kOk;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_DOWNLOAD_CALL_H_
