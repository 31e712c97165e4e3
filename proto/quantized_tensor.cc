#include "proto/quantized_tensor.h"

#include <string>

namespace gemmd {

gemm::v1::QuantizedTensor ToProto(const Int8Matrix& m) {
  gemm::v1::QuantizedTensor t;
  t.add_shape(m.rows);
  t.add_shape(m.cols);
  t.set_format(gemm::v1::QUANT_FORMAT_INT8);
  t.set_data(std::string(reinterpret_cast<const char*>(m.values.data()), m.values.size()));
  // Little-endian float32, as the host stores them (x86-64 and AArch64 both are).
  t.set_scales(std::string(reinterpret_cast<const char*>(m.scales.data()), m.scales.size() * 4));
  return t;
}

gemm::v1::QuantizedTensor ToProto(const Nvfp4Matrix& m) {
  gemm::v1::QuantizedTensor t;
  t.add_shape(m.rows);
  t.add_shape(m.cols);
  t.set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  t.set_data(std::string(reinterpret_cast<const char*>(m.packed.data()), m.packed.size()));
  t.set_scales(
      std::string(reinterpret_cast<const char*>(m.block_scales.data()), m.block_scales.size()));
  t.set_tensor_scale(m.tensor_scale);
  return t;
}

}  // namespace gemmd
