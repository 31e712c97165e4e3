#include "proto/proto_types.h"

#include "absl/strings/str_cat.h"

namespace gemmd {

std::optional<DataType> DataTypeFromProto(int value) {
  switch (value) {
    case gemm::v1::DATA_TYPE_FLOAT32:
      return DataType::kFloat32;
    case gemm::v1::DATA_TYPE_FLOAT16:
      return DataType::kFloat16;
    case gemm::v1::DATA_TYPE_BFLOAT16:
      return DataType::kBFloat16;
    case gemm::v1::DATA_TYPE_INT8:
      return DataType::kInt8;
    case gemm::v1::DATA_TYPE_INT32:
      return DataType::kInt32;
    case gemm::v1::DATA_TYPE_FLOAT64:
      return DataType::kFloat64;
    default:
      return std::nullopt;
  }
}

gemm::v1::DataType DataTypeToProto(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return gemm::v1::DATA_TYPE_FLOAT32;
    case DataType::kFloat16:
      return gemm::v1::DATA_TYPE_FLOAT16;
    case DataType::kBFloat16:
      return gemm::v1::DATA_TYPE_BFLOAT16;
    case DataType::kInt8:
      return gemm::v1::DATA_TYPE_INT8;
    case DataType::kInt32:
      return gemm::v1::DATA_TYPE_INT32;
    case DataType::kFloat64:
      return gemm::v1::DATA_TYPE_FLOAT64;
  }
  return gemm::v1::DATA_TYPE_UNSPECIFIED;
}

std::optional<Precision> PrecisionFromProto(int value) {
  switch (value) {
    case gemm::v1::PRECISION_FP32:
      return Precision::kFp32;
    case gemm::v1::PRECISION_FP16_TENSOR:
      return Precision::kFp16Tensor;
    case gemm::v1::PRECISION_FP64:
      return Precision::kFp64;
    default:
      return std::nullopt;
  }
}

gemm::v1::Precision PrecisionToProto(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return gemm::v1::PRECISION_FP32;
    case Precision::kFp16Tensor:
      return gemm::v1::PRECISION_FP16_TENSOR;
    case Precision::kFp64:
      return gemm::v1::PRECISION_FP64;
  }
  return gemm::v1::PRECISION_AUTO;
}

std::string ProtoDataTypeName(int value) {
  if (value == gemm::v1::DATA_TYPE_UNSPECIFIED) return "UNSPECIFIED";
  const std::optional<DataType> type = DataTypeFromProto(value);
  return type ? DataTypeName(*type) : absl::StrCat(value);
}

std::string ProtoPrecisionName(int value) {
  if (value == gemm::v1::PRECISION_AUTO) return "AUTO";
  const std::optional<Precision> precision = PrecisionFromProto(value);
  return precision ? PrecisionName(*precision) : absl::StrCat(value);
}

}  // namespace gemmd
