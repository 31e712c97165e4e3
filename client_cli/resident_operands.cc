#include "client_cli/resident_operands.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/tensor_chunks.h"
#include "kernels/quant_formats.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"

namespace gemmd {

absl::StatusOr<uint32_t> TtlOf(const CliOptions& o) {
  if (o.ttl_s < 0 || o.ttl_s > int64_t{0xffffffff}) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ttl_s must be a number of seconds in [0, 4294967295], not ", o.ttl_s));
  }
  return static_cast<uint32_t>(o.ttl_s);
}

namespace {

// A call about @handle that failed: its code kept, and named in the message as gemm-cli
// names RPC errors ("@H: GetTensor failed: NOT_FOUND: ...").
absl::Status Failed(const std::string& handle, const char* rpc, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("@", handle, ": ", rpc, " failed: ",
                                   absl::StatusCodeToString(status.code()), ": ",
                                   status.message()));
}

}  // namespace

std::optional<std::string> HandleOf(const std::string& spec) {
  if (!absl::StartsWith(spec, "@")) return std::nullopt;
  return spec.substr(1);
}

absl::StatusOr<ResidentOperand> ServerResidentLookup::Find(const std::string& handle,
                                                          bool download) {
  ResidentOperand out;
  out.handle = handle;
  if (download) {
    absl::StatusOr<DownloadedTensor> got = store_->GetTensor(handle, timeout_);
    if (!got.ok()) return Failed(handle, "GetTensor", got.status());
    out.header = std::move(got->header);
    out.data = std::move(got->data);
    out.scales = std::move(got->scales);
    out.downloaded = true;
    return out;
  }
  if (!list_) {
    absl::StatusOr<gemm::v1::ListTensorsResponse> list = store_->ListTensors(timeout_);
    if (!list.ok()) return Failed(handle, "ListTensors", list.status());
    list_ = *std::move(list);
  }
  for (const gemm::v1::TensorInfo& t : list_->tensors()) {
    if (t.handle().handle() != handle) continue;
    if (!t.complete()) {
      return absl::FailedPreconditionError(
          absl::StrCat("@", handle, " is still being uploaded"));
    }
    *out.header.mutable_shape() = t.shape();
    out.header.set_dtype(t.dtype());
    out.header.set_format(t.format());
    out.header.set_tensor_scale(t.tensor_scale());
    out.header.set_label(t.label());
    return out;
  }
  return absl::NotFoundError(absl::StrCat("@", handle,
                                          ": NOT_FOUND: no resident tensor with this handle on "
                                          "the server (gemm-cli ls lists them)"));
}

absl::StatusOr<DataType> DenseTypeOf(const ResidentOperand& operand, const char* flag) {
  if (operand.quantized()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " @", operand.handle, " is a quantized tensor (",
        operand.header.format() == gemm::v1::QUANT_FORMAT_INT8 ? "INT8" : "NVFP4",
        "); matmul takes dense ones (gemm-cli quantized takes it as B)"));
  }
  const std::optional<DataType> type = DataTypeFromProto(operand.header.dtype());
  if (!type) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " @", operand.handle,
                                                   " has dtype ",
                                                   ProtoDataTypeName(operand.header.dtype())));
  }
  return *type;
}

absl::StatusOr<std::vector<float>> ValuesAsFloat(const ResidentOperand& operand) {
  absl::StatusOr<TensorRows> rows = RowsOf(operand.header);
  if (!rows.ok()) return rows.status();
  if (static_cast<int64_t>(operand.data.size()) != rows->data_bytes() ||
      static_cast<int64_t>(operand.scales.size()) != rows->scales_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("@", operand.handle, ": ",
                                                   operand.data.size(),
                                                   " data bytes do not match its shape"));
  }
  if (operand.quantized()) {
    const int64_t n = rows->rows, k = operand.header.shape(1);
    std::vector<float> out(static_cast<size_t>(n * k));
    if (operand.header.format() == gemm::v1::QUANT_FORMAT_INT8) {
      std::vector<float> scales(static_cast<size_t>(n));
      std::memcpy(scales.data(), operand.scales.data(), operand.scales.size());
      DequantizeInt8(reinterpret_cast<const int8_t*>(operand.data.data()), scales.data(), n, k,
                     out.data());
      return out;
    }
    if (absl::Status s = DequantizeNvfp4(
            reinterpret_cast<const uint8_t*>(operand.data.data()),
            reinterpret_cast<const uint8_t*>(operand.scales.data()),
            operand.header.tensor_scale(), n, k, out.data());
        !s.ok()) {
      return s;
    }
    return out;
  }
  const DataType type = *DataTypeFromProto(operand.header.dtype());  // RowsOf checked it
  if (type == DataType::kInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat("@", operand.handle, " is INT32, which float32 does not hold exactly"));
  }
  const int64_t count = static_cast<int64_t>(operand.data.size() / DataTypeSize(type));
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    out[static_cast<size_t>(i)] =
        static_cast<float>(LoadAsDouble(operand.data.data(), type, i));
  }
  return out;
}

}  // namespace gemmd
