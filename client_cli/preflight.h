// What gemm-cli checks before it builds a request: its own flags, whether the request
// fits the server's advertised limits (GetServerInfo) and this machine's memory, and
// whether --out can be written. All sizes come from the flags, multiplied in 64 bits, so
// nothing is allocated for a request that could not be sent (a 100000 x 100000 operand
// is an error message, not std::bad_alloc), and nothing is sent that the server would
// refuse for its size (a 1.6 GB request to a 512 MiB server fails at once, not after
// 28 s of upload).
#ifndef GEMMD_CLIENT_CLI_PREFLIGHT_H_
#define GEMMD_CLIENT_CLI_PREFLIGHT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client_cli/cli_options.h"

namespace gemmd {

// What one call of a command sends, receives and keeps in this process.
struct RequestSize {
  int64_t request_bytes = 0;         // tensor payload sent
  int64_t largest_operand = 0;       // elements of the largest operand
  int64_t result_elements = 0;
  int64_t result_bytes = 0;
  int64_t client_bytes = 0;          // what the CLI holds at once for it
};

// From the flags of `matmul` / `bench` (random operands, or the sizes of the .npy files).
// INVALID_ARGUMENT for dimensions < 1 or products past 2^63.
absl::StatusOr<RequestSize> MatmulRequestSize(const CliOptions& options);
// Same for `quantized` (and bench --quantized).
absl::StatusOr<RequestSize> QuantizedRequestSize(const CliOptions& options);

struct ServerLimits {
  int64_t max_message_bytes = 0;
  int64_t max_elements = 0;
};

// RESOURCE_EXHAUSTED, saying which limit and by how much, when `size` would pass the
// server's limits (skipped when `limits` is empty: --local) or `available_bytes` of this
// machine's memory.
absl::Status CheckRequestFits(const RequestSize& size, const std::optional<ServerLimits>& limits,
                              int64_t available_bytes);

// Memory this machine has available now (MemAvailable), or its physical memory.
int64_t AvailableMemoryBytes();

// INVALID_ARGUMENT when --timeout_s is not > 0, --stripes is not in [0, kMaxStripes], or
// --out names a file that cannot be created (its directory missing or not writable).
absl::Status CheckCommonFlags(const CliOptions& options);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_PREFLIGHT_H_
