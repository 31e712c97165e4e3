#include "proto/wire/stream_wire.h"

#include "absl/strings/str_cat.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/wire/wire_fields.h"

namespace gemmd::wire {
namespace {

using Request = gemm::v1::StreamRequest;
using Response = gemm::v1::StreamResponse;

void AppendVarintField(std::string* out, uint32_t field, uint64_t value) {
  AppendVarint(out, uint64_t{field} << 3 | static_cast<uint32_t>(WireType::kVarint));
  AppendVarint(out, value);
}

static_assert(static_cast<int>(Request::kBatchFieldNumber) ==
                  static_cast<int>(Response::kBatchFieldNumber),
              "StreamBatchElementHead serves both messages");

// One element of a batch (a repeated message field), left where it is; at most
// kMaxStreamBatch of them.
absl::Status BatchElement(const Fields& f, WireCursor* in, const Tag& tag,
                          std::vector<ByteRuns>* batch) {
  if (absl::Status s = f.Type(tag, "batch", WireType::kLengthDelimited); !s.ok()) return s;
  if (batch->size() >= kMaxStreamBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch has more than ", kMaxStreamBatch, " elements; send at most that many a message"));
  }
  size_t length = 0;
  if (absl::Status s = in->ReadLength(&length, "batch"); !s.ok()) return s;
  batch->emplace_back();
  return in->TakeRuns(length, &batch->back(), "batch");
}

// `from`'s pieces after `out`'s, its payloads still referenced.
void AppendPieces(const EncodedMessage& from, EncodedMessage* out) {
  for (const EncodedMessage::Piece& piece : from.pieces()) {
    if (piece.is_payload) {
      out->AddPayload(piece.payload);
    } else {
      out->AddOwned(piece.owned);
    }
  }
}

}  // namespace

absl::Status ParseStreamRequest(const ByteRuns& bytes, StreamRequestWire* out) {
  Fields f("");
  const absl::Status s = ForEachField(
      WireCursor(bytes), "gemm.v1.StreamRequest",
      [&](const Tag& tag, WireCursor* c) -> FieldResult {
        switch (tag.field) {
          case Request::kIdFieldNumber:
            return f.Uint64(c, tag, "id", &out->id);
          case Request::kMatmulFieldNumber:
          case Request::kQuantizedFieldNumber: {
            const bool matmul = tag.field == Request::kMatmulFieldNumber;
            if (out->call != StreamCall::kNone) {
              return absl::InvalidArgumentError(
                  "it carries both matmul and quantized; set one of them");
            }
            out->call = matmul ? StreamCall::kMatmul : StreamCall::kQuantized;
            return f.Payload(c, tag, matmul ? "matmul" : "quantized", &out->body);
          }
          case Request::kTimeoutUsFieldNumber:
            return f.Uint64(c, tag, "timeout_us", &out->timeout_us);
          case Request::kBatchFieldNumber:
            return BatchElement(f, c, tag, &out->batch);
        }
        return std::nullopt;
      });
  absl::Status checked = s;
  if (checked.ok() && !out->batch.empty() &&
      (out->id != 0 || out->call != StreamCall::kNone || out->timeout_us != 0)) {
    checked = absl::InvalidArgumentError(
        "a message that sets batch carries no request of its own (id, matmul, quantized and "
        "timeout_us unset)");
  }
  return Invalid("stream request", "gemm.v1.StreamRequest", checked);
}

EncodedMessage EncodeStreamRequest(uint64_t id, StreamCall call, uint64_t timeout_us,
                                   const EncodedMessage& body) {
  std::string head;
  if (id != 0) AppendVarintField(&head, Request::kIdFieldNumber, id);
  if (timeout_us != 0) AppendVarintField(&head, Request::kTimeoutUsFieldNumber, timeout_us);
  if (call != StreamCall::kNone) {
    AppendLengthDelimitedHead(&head,
                              call == StreamCall::kMatmul ? Request::kMatmulFieldNumber
                                                          : Request::kQuantizedFieldNumber,
                              body.size());
  }
  EncodedMessage out;
  out.AddOwned(head);
  if (call == StreamCall::kNone) return out;
  AppendPieces(body, &out);
  return out;
}

EncodedMessage EncodeStreamBatch(const std::vector<EncodedMessage>& elements) {
  EncodedMessage out;
  for (const EncodedMessage& element : elements) {
    out.AddOwned(StreamBatchElementHead(element.size()));
    AppendPieces(element, &out);
  }
  return out;
}

std::string StreamBatchElementHead(size_t bytes) {
  std::string head;
  AppendLengthDelimitedHead(&head, Request::kBatchFieldNumber, bytes);
  return head;
}

absl::Status ParseStreamResponse(const ByteRuns& bytes, StreamResponseWire* out) {
  Fields f("");
  const absl::Status s = ForEachField(
      WireCursor(bytes), "gemm.v1.StreamResponse",
      [&](const Tag& tag, WireCursor* c) -> FieldResult {
        switch (tag.field) {
          case Response::kIdFieldNumber:
            return f.Uint64(c, tag, "id", &out->id);
          case Response::kCodeFieldNumber:
            return f.Int32(c, tag, "code", &out->code);
          case Response::kMessageFieldNumber:
            return f.String(c, tag, "message", &out->message);
          case Response::kResultFieldNumber:
            out->has_result = true;
            return f.Payload(c, tag, "result", &out->result);
          case Response::kBatchFieldNumber:
            return BatchElement(f, c, tag, &out->batch);
        }
        return std::nullopt;
      });
  return Invalid("stream response", "gemm.v1.StreamResponse", s);
}

std::string StreamResponseHead(uint64_t id, int32_t code, absl::string_view message,
                               std::optional<size_t> result_bytes) {
  std::string head;
  if (id != 0) AppendVarintField(&head, Response::kIdFieldNumber, id);
  // int32 on the wire: a negative code would be ten bytes, as protobuf writes it.
  if (code != 0) {
    AppendVarintField(&head, Response::kCodeFieldNumber,
                      static_cast<uint64_t>(static_cast<int64_t>(code)));
  }
  if (!message.empty()) {
    AppendLengthDelimitedHead(&head, Response::kMessageFieldNumber, message.size());
    head.append(message.data(), message.size());
  }
  if (result_bytes) AppendLengthDelimitedHead(&head, Response::kResultFieldNumber, *result_bytes);
  return head;
}

}  // namespace gemmd::wire
