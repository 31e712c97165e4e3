// The GEMM messages on the wire, parsed and encoded around their tensor payloads: a
// request's tensors stay where gRPC received them (ByteRuns) until they are copied once
// to where the device reads them, and a message is sent as pieces that reference the
// payloads instead of copying them into a serialized string.
//
// The bytes are standard protobuf both ways: what these encoders produce, the generated
// parser reads; what any protobuf serializer produces, these parsers read, in any field
// order, packed or unpacked shapes, unknown fields skipped. Stricter than protobuf in
// one way: a singular field that appears twice (which no serializer writes) is refused,
// as are truncated or overlapping lengths and fields of the wrong wire type. Errors are
// INVALID_ARGUMENT naming the field ("a.data claims 4096 bytes but only 12 remain").
// Thread-compatible.
#ifndef GEMMD_PROTO_WIRE_GEMM_WIRE_H_
#define GEMMD_PROTO_WIRE_GEMM_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/wire/wire_format.h"

namespace gemmd::wire {

// Shapes longer than this are refused while parsing (every operand has rank 2 or 3), so
// a message of repeated shape entries cannot make the parser allocate for them.
inline constexpr int kMaxShapeEntries = 16;

// A MatmulRequest: every field in `head` except the tensors' data, which is in the
// *_data runs (views into the parsed bytes). head.has_c() says whether c was sent.
struct MatmulRequestWire {
  gemm::v1::MatmulRequest head;
  ByteRuns a_data, b_data, c_data;
};
absl::Status ParseMatmulRequest(const ByteRuns& bytes, MatmulRequestWire* out);

// A QuantizedMatmulRequest likewise: head without data and scales.
struct QuantizedMatmulRequestWire {
  gemm::v1::QuantizedMatmulRequest head;
  ByteRuns a_data, a_scales;  // a (quantized)
  ByteRuns a_dense_data;      // a_dense
  ByteRuns b_data, b_scales;
};
absl::Status ParseQuantizedMatmulRequest(const ByteRuns& bytes, QuantizedMatmulRequestWire* out);

// A MatmulResponse: head without c's data.
struct MatmulResponseWire {
  gemm::v1::MatmulResponse head;
  ByteRuns c_data;
};
absl::Status ParseMatmulResponse(const ByteRuns& bytes, MatmulResponseWire* out);

// A TensorChunk (PutTensor): its header, when present, parsed whole (it is small);
// data and scales left where they are.
struct TensorChunkWire {
  bool has_header = false;
  gemm::v1::TensorHeader header;
  ByteRuns data, scales;
  // data_shm / scales_shm, when set (their `region` non-empty or has_*).
  bool has_data_shm = false, has_scales_shm = false;
  gemm::v1::RegionSlice data_shm, scales_shm;
};
absl::Status ParseTensorChunk(const ByteRuns& bytes, TensorChunkWire* out);

// An encoded message as pieces in order: bytes it owns (tags, lengths, small fields) and
// payloads it only references (which must outlive the pieces' use).
class EncodedMessage {
 public:
  struct Piece {
    bool is_payload = false;
    std::string owned;          // !is_payload
    absl::string_view payload;  // is_payload
  };
  void AddOwned(absl::string_view bytes);
  void AddPayload(absl::string_view bytes);
  const std::vector<Piece>& pieces() const { return pieces_; }
  size_t size() const { return size_; }
  // All pieces in one string (tests, and small messages).
  std::string Flatten() const;

 private:
  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

// `head`'s tensors must carry no data: the payloads are given apart, each used only when
// its tensor is set in `head` (an operand sent by reference, a_ref, has none).
EncodedMessage EncodeMatmulRequest(const gemm::v1::MatmulRequest& head, absl::string_view a_data,
                                   absl::string_view b_data, absl::string_view c_data);

struct QuantizedPayloads {
  absl::string_view a_data, a_scales;  // when head.has_a()
  absl::string_view a_dense_data;      // when head.has_a_dense()
  absl::string_view b_data, b_scales;  // when head.has_b()
};
EncodedMessage EncodeQuantizedMatmulRequest(const gemm::v1::QuantizedMatmulRequest& head,
                                            const QuantizedPayloads& payloads);

// C's shape and dtype (`c_head`, no data), its bytes, and every other field (`rest`, its
// c unset): the server holds them apart, so nothing is copied to join them.
EncodedMessage EncodeMatmulResponse(const gemm::v1::Tensor& c_head, absl::string_view c_data,
                                    const gemm::v1::MatmulResponse& rest);

// One TensorChunk (PutTensor's and GetTensor's stream): the header when given, then
// `data` and `scales` as payloads the message references (each left out when empty).
EncodedMessage EncodeTensorChunk(const gemm::v1::TensorHeader* header, absl::string_view data,
                                 absl::string_view scales);

}  // namespace gemmd::wire

#endif  // GEMMD_PROTO_WIRE_GEMM_WIRE_H_
