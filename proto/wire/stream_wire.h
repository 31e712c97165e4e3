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
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/wire/gemm_wire.h"
#include "proto/wire/wire_format.h"

namespace gemmd::wire {

// Which request a StreamRequest carries.
enum class StreamCall { kNone, kMatmul, kQuantized };

// Most requests (answers) one message's batch may carry.
inline constexpr size_t kMaxStreamBatch = 256;
// Most bytes a sender puts in one batch (a request or answer larger than this goes
// alone): well under the 4 MiB a default gRPC peer takes a message.
inline constexpr size_t kStreamBatchBytes = size_t{1} << 20;

// How many of the `waiting` messages queued to be sent (in order; `length_of(i)`: the
// i-th one's bytes) the next message takes: all up to kMaxStreamBatch, and past the
// first no more than kStreamBatchBytes in all. 0 when none waits.
template <typename LengthOf>
size_t StreamBatchTake(size_t waiting, LengthOf length_of) {
  size_t taken = 0, bytes = 0;
  while (taken < waiting && taken < kMaxStreamBatch &&
         (taken == 0 || bytes + length_of(taken) <= kStreamBatchBytes)) {
    bytes += length_of(taken++);
  }
  return taken;
}

struct StreamRequestWire {
  uint64_t id = 0;
  StreamCall call = StreamCall::kNone;  // kNone: the message carried neither
  ByteRuns body;                        // the MatmulRequest's or QuantizedMatmulRequest's bytes
  uint64_t timeout_us = 0;
  // A batch: each element one StreamRequest's bytes, to parse on its own (the message's
  // own fields are then unset).
  std::vector<ByteRuns> batch;
};
// INVALID_ARGUMENT naming the field, as gemm_wire.h's parsers, also for a batch of more
// than kMaxStreamBatch or beside fields of the message's own. A request without a call
// parses (call = kNone) so that it can be answered by its id. A batch's elements are not
// parsed here (ParseStreamRequest each; one that carries a batch of its own is refused
// by the caller).
absl::Status ParseStreamRequest(const ByteRuns& bytes, StreamRequestWire* out);

// A StreamRequest around `body`, an encoded MatmulRequest (kMatmul) or
// QuantizedMatmulRequest (kQuantized), whose payloads it references in turn.
EncodedMessage EncodeStreamRequest(uint64_t id, StreamCall call, uint64_t timeout_us,
                                   const EncodedMessage& body);
// One StreamRequest (or StreamResponse) carrying `elements`, each an encoded message of
// its kind, in its batch (their payloads referenced in turn).
EncodedMessage EncodeStreamBatch(const std::vector<EncodedMessage>& elements);
// The bytes that go before one batch element of `bytes` bytes (its tag and length).
std::string StreamBatchElementHead(size_t bytes);

struct StreamResponseWire {
  uint64_t id = 0;
  int32_t code = 0;
  std::string message;
  bool has_result = false;
  ByteRuns result;  // the MatmulResponse's bytes (ParseMatmulResponse)
  std::vector<ByteRuns> batch;  // as StreamRequestWire's
};
absl::Status ParseStreamResponse(const ByteRuns& bytes, StreamResponseWire* out);

// A StreamResponse's bytes up to its result's: id, code, message, then the result's tag
// and length when it has one of `result_bytes` (the MatmulResponse follows).
std::string StreamResponseHead(uint64_t id, int32_t code, absl::string_view message,
                               std::optional<size_t> result_bytes);

}  // namespace gemmd::wire

#endif  // GEMMD_PROTO_WIRE_STREAM_WIRE_H_
