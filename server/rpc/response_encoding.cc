#include "server/rpc/response_encoding.h"

#include <grpcpp/support/slice.h>

#include <vector>

#include "proto/wire/gemm_wire.h"

namespace gemmd {
namespace {

void FreeResult(void* result) { delete static_cast<HostBuffer*>(result); }

}  // namespace

grpc::ByteBuffer EncodeMatmulResponse(const gemm::v1::Tensor& c_head,
                                      std::unique_ptr<HostBuffer> result,
                                      const gemm::v1::MatmulResponse& rest) {
  const wire::EncodedMessage message = wire::EncodeMatmulResponse(
      c_head, absl::string_view(result->data(), result->size()), rest);
  std::vector<grpc::Slice> slices;
  slices.reserve(message.pieces().size());
  HostBuffer* owned = result.release();
  bool owned_placed = false;
  for (const wire::EncodedMessage::Piece& piece : message.pieces()) {
    if (piece.is_payload) {
      slices.emplace_back(owned->data(), owned->size(), &FreeResult, owned);
      owned_placed = true;
    } else {
      slices.emplace_back(piece.owned);
    }
  }
  if (!owned_placed) delete owned;  // an empty C: no payload piece
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace gemmd
