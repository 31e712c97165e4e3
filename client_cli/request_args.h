// The client library's call arguments for a request gemm-cli has built (MatmulInputs,
// QuantizedInputs keep their operands in a gemm.v1 message): views of the message's
// tensors, so the library sends them from there without another copy.
#ifndef GEMMD_CLIENT_CLI_REQUEST_ARGS_H_
#define GEMMD_CLIENT_CLI_REQUEST_ARGS_H_

#include "client/gemm_client.h"
#include "gemm/v1/gemm.pb.h"

namespace gemmd {

// The args reference `request`, which must outlive their use.
MatmulArgs ArgsOf(const gemm::v1::MatmulRequest& request);
QuantizedMatmulArgs ArgsOf(const gemm::v1::QuantizedMatmulRequest& request);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_REQUEST_ARGS_H_
