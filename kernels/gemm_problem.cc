#include "kernels/gemm_problem.h"

namespace gemmd {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt8:
      return 1;
  }
  return 0;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "FLOAT32";
    case DataType::kFloat16:
      return "FLOAT16";
    case DataType::kBFloat16:
      return "BFLOAT16";
    case DataType::kInt8:
      return "INT8";
    case DataType::kInt32:
      return "INT32";
    case DataType::kFloat64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "FP32";
    case Precision::kFp16Tensor:
      return "FP16_TENSOR";
    case Precision::kFp64:
      return "FP64";
  }
  return "UNKNOWN";
}

double RoundedToFp32(double v) { return static_cast<float>(v); }

DataType TensorOperandType(DataType input_type) {
  // BF16 keeps its range on the tensor path; everything else is rounded to FP16.
  return input_type == DataType::kBFloat16 ? DataType::kBFloat16 : DataType::kFloat16;
}

}  // namespace gemmd
