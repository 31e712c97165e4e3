// MatmulStream's messages on the wire (gemm.proto's StreamRequest and StreamResponse):
// envelopes around a MatmulRequest, a QuantizedMatmulRequest or a MatmulResponse whose
// bytes stay where they were received (parsing) or are referenced (encoding), as
// gemm_wire.h does for the messages inside. Standard protobuf both ways; stricter in the
// same way as gemm_wire.h (a field twice, or both calls of the oneof, is refused).
// Thread-compatible.
#ifndef GEMMD_PROTO_WIRE_STREAM_WIRE_H_
#define GEMMD_PROTO_WIRE_STREAM_WIRE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/wire/gemm_wire.h"
#include "proto/wire/wire_format.h"

namespace gemmd::wire {

// Which request a StreamRequest carries.
enum class StreamCall { kNone, kMatmul, kQuantized };

struct StreamRequestWire {
  uint64_t id = 0;
  StreamCall call = StreamCall::kNone;  // kNone: the message carried neither
  ByteRuns body;                        // the MatmulRequest's or QuantizedMatmulRequest's bytes
  uint64_t timeout_us = 0;
};
// INVALID_ARGUMENT naming the field, as gemm_wire.h's parsers. A request without a call
// parses (call = kNone) so that it can be answered by its id.
absl::Status ParseStreamRequest(const ByteRuns& bytes, StreamRequestWire* out);

// A StreamRequest around `body`, an encoded MatmulRequest (kMatmul) or
// QuantizedMatmulRequest (kQuantized), whose payloads it references in turn.
EncodedMessage EncodeStreamRequest(uint64_t id, StreamCall call, uint64_t timeout_us,
                                   const EncodedMessage& body);

struct StreamResponseWire {
  uint64_t id = 0;
  int32_t code = 0;
  std::string message;
  bool has_result = false;
  ByteRuns result;  // the MatmulResponse's bytes (ParseMatmulResponse)
};
absl::Status ParseStreamResponse(const ByteRuns& bytes, StreamResponseWire* out);

// A StreamResponse's bytes up to its result's: id, code, message, then the result's tag
// and length when it has one of `result_bytes` (the MatmulResponse follows).
std::string StreamResponseHead(uint64_t id, int32_t code, absl::string_view message,
                               std::optional<size_t> result_bytes);

}  // namespace gemmd::wire

#endif  // GEMMD_PROTO_WIRE_STREAM_WIRE_H_
