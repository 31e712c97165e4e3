#include "server/rpc/raw_messages.h"

#include <grpcpp/support/slice.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gemmd {

absl::Status ParseSmallRequest(const grpc::ByteBuffer& bytes, google::protobuf::MessageLite* out) {
  const int64_t length = static_cast<int64_t>(bytes.Length());
  if (length > kMaxSmallRequestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the request has ", length, " bytes; a ",
                                                   out->GetTypeName(), " takes at most ",
                                                   kMaxSmallRequestBytes));
  }
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request's bytes could not be read as a ", out->GetTypeName()));
  }
  std::string flat;
  flat.reserve(static_cast<size_t>(length));
  for (const grpc::Slice& s : slices) {
    flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (!out->ParseFromString(flat)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a valid ", out->GetTypeName(),
                     " (malformed protobuf, or a string field that is not UTF-8)"));
  }
  return absl::OkStatus();
}

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace gemmd
