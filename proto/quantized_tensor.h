// QuantizedTensor <-> the kernel library's quantized matrices (kernels/quant_formats.h),
// for the client (building requests) and the tests. Thread-safe (pure functions).
#ifndef GEMMD_PROTO_QUANTIZED_TENSOR_H_
#define GEMMD_PROTO_QUANTIZED_TENSOR_H_

#include "gemm/v1/gemm.pb.h"
#include "kernels/quant_formats.h"

namespace gemmd {

gemm::v1::QuantizedTensor ToProto(const Int8Matrix& m);
gemm::v1::QuantizedTensor ToProto(const Nvfp4Matrix& m);

}  // namespace gemmd

#endif  // GEMMD_PROTO_QUANTIZED_TENSOR_H_
