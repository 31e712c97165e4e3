// Operands named by handle on gemm-cli's command line (--a @HANDLE): what the resident
// tensor is (for shapes, sizes and the problem to verify against), and its bytes when a
// command must compute with them (--verify downloads them).
#ifndef GEMMD_CLIENT_CLI_RESIDENT_OPERANDS_H_
#define GEMMD_CLIENT_CLI_RESIDENT_OPERANDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/tensor_store_client.h"
#include "client_cli/cli_options.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

// --ttl_s as the API's uint32; INVALID_ARGUMENT outside [0, 2^32).
absl::StatusOr<uint32_t> TtlOf(const CliOptions& options);

// "@HANDLE" -> HANDLE; nullopt for anything else (a file path, "").
std::optional<std::string> HandleOf(const std::string& spec);

struct ResidentOperand {
  std::string handle;
  gemm::v1::TensorHeader header;  // shape; dtype (dense) or format, tensor_scale
  bool downloaded = false;        // data and scales hold its bytes
  std::string data, scales;

  bool quantized() const { return header.format() != gemm::v1::QUANT_FORMAT_UNSPECIFIED; }
  std::vector<int64_t> shape() const { return {header.shape().begin(), header.shape().end()}; }
};

// Finds resident tensors for a command. Errors: NOT_FOUND naming the handle, or the
// server's status.
class ResidentLookup {
 public:
  virtual ~ResidentLookup() = default;
  // Its header; with `download`, its bytes too.
  virtual absl::StatusOr<ResidentOperand> Find(const std::string& handle, bool download) = 0;
};

// Through the server: the headers from one ListTensors, the bytes by GetTensor.
class ServerResidentLookup : public ResidentLookup {
 public:
  ServerResidentLookup(TensorStoreClient* store, absl::Duration timeout)
      : store_(store), timeout_(timeout) {}
  absl::StatusOr<ResidentOperand> Find(const std::string& handle, bool download) override;

 private:
  TensorStoreClient* const store_;
  const absl::Duration timeout_;
  std::optional<gemm::v1::ListTensorsResponse> list_;
};

// The DataType of a dense resident tensor; INVALID_ARGUMENT naming `flag` for a
// quantized one or an unknown dtype.
absl::StatusOr<DataType> DenseTypeOf(const ResidentOperand& operand, const char* flag);

// Its values as FP32, row-major in its shape, from its downloaded bytes: a dense
// FLOAT32/FLOAT16/BFLOAT16/INT8 tensor widened (exactly), a quantized one dequantized.
// INVALID_ARGUMENT for INT32 (not exact in FP32), or bytes that do not match the shape.
absl::StatusOr<std::vector<float>> ValuesAsFloat(const ResidentOperand& operand);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_RESIDENT_OPERANDS_H_
