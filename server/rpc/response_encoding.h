// Puts a MatmulResponse on the wire without copying C: the bytes gRPC sends are standard
// protobuf (any generated client parses them; proto/wire/gemm_wire.h encodes them),
// built from three slices: the fields of C up to its data's length prefix, C's bytes
// themselves (a slice that references the result buffer and frees it when gRPC is done
// with it), and the response's other fields.
#ifndef GEMMD_SERVER_RPC_RESPONSE_ENCODING_H_
#define GEMMD_SERVER_RPC_RESPONSE_ENCODING_H_

#include <grpcpp/support/byte_buffer.h>

#include <memory>

#include "gemm/v1/gemm.pb.h"
#include "server/rpc/host_memory.h"

namespace gemmd {

// `c_head`: C's shape and dtype (its data empty); `result`: C's bytes, owned by the
// returned buffer from now on; `rest`: every other field of the response (its c unset).
grpc::ByteBuffer EncodeMatmulResponse(const gemm::v1::Tensor& c_head,
                                      std::unique_ptr<HostBuffer> result,
                                      const gemm::v1::MatmulResponse& rest);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_RESPONSE_ENCODING_H_
