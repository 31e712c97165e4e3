// Mapping between the API's proto enums and the kernel library's plain C++ types. Used
// by the server (decoding requests) and the client (building them). Thread-safe.
#ifndef GEMMD_PROTO_PROTO_TYPES_H_
#define GEMMD_PROTO_PROTO_TYPES_H_

#include <optional>
#include <string>

#include "gemm/v1/gemm.pb.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

// nullopt for DATA_TYPE_UNSPECIFIED and values outside the enum.
std::optional<DataType> DataTypeFromProto(int value);
gemm::v1::DataType DataTypeToProto(DataType type);

// nullopt for PRECISION_AUTO and values outside the enum.
std::optional<Precision> PrecisionFromProto(int value);
gemm::v1::Precision PrecisionToProto(Precision precision);

// For messages: "FLOAT32", "UNSPECIFIED", or the number for unknown values.
std::string ProtoDataTypeName(int value);
std::string ProtoPrecisionName(int value);

}  // namespace gemmd

#endif  // GEMMD_PROTO_PROTO_TYPES_H_
