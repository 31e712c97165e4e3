#include "server/rpc/response_encoding.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/slice.h>

#include <string>

namespace gemmd {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

void AppendTag(std::string* out, int field) {
  out->push_back(static_cast<char>(
      WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)));
}

void AppendVarint(std::string* out, uint64_t value) {
  uint8_t bytes[10];
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(value, bytes);
  out->append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(end - bytes));
}

void FreeResult(void* result) { delete static_cast<ResultBuffer*>(result); }

}  // namespace

grpc::ByteBuffer EncodeMatmulResponse(const gemm::v1::Tensor& c_head,
                                      std::unique_ptr<ResultBuffer> result,
                                      const gemm::v1::MatmulResponse& rest) {
  constexpr int kResponseC = gemm::v1::MatmulResponse::kCFieldNumber;
  constexpr int kTensorData = gemm::v1::Tensor::kDataFieldNumber;
  static_assert(kResponseC < 16 && kTensorData < 16, "one-byte tags");
  const uint64_t data_bytes = result->size();
  const std::string tensor_fields = c_head.SerializeAsString();  // data is empty: not written
  const uint64_t tensor_bytes = tensor_fields.size() + 1 +
                                CodedOutputStream::VarintSize64(data_bytes) + data_bytes;
  std::string head;
  AppendTag(&head, kResponseC);
  AppendVarint(&head, tensor_bytes);
  head += tensor_fields;
  AppendTag(&head, kTensorData);
  AppendVarint(&head, data_bytes);

  ResultBuffer* owned = result.release();
  grpc::Slice slices[3] = {
      grpc::Slice(head),
      grpc::Slice(owned->data(), owned->size(), &FreeResult, owned),
      grpc::Slice(rest.SerializeAsString()),
  };
  return grpc::ByteBuffer(slices, 3);
}

}  // namespace gemmd
