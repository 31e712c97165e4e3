// proto/wire against the generated protobuf code, both ways (MatmulStream's envelopes
// too): what the generated
// serializer writes, the wire parsers read (split across many slices, fields in any
// order, unknown fields, packed or unpacked shapes); what the wire encoders write, the
// generated parser reads. And every malformed input is refused naming its field.
#include "proto/wire/gemm_wire.h"
#include "proto/wire/stream_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"

namespace gemmd::wire {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 31 + seed);
  return s;
}

// `whole` cut into pieces of the given sizes (cycled), as gRPC hands over a message.
ByteRuns Split(const std::string& whole, std::vector<size_t> sizes) {
  ByteRuns runs;
  size_t at = 0, i = 0;
  while (at < whole.size()) {
    const size_t n = std::min(sizes[i++ % sizes.size()], whole.size() - at);
    runs.Append(absl::string_view(whole).substr(at, n));
    at += n;
  }
  return runs;
}

std::string Joined(const ByteRuns& runs) {
  std::string s(runs.size(), '\0');
  runs.CopyTo(s.data());
  return s;
}

gemm::v1::MatmulRequest FullMatmul() {
  gemm::v1::MatmulRequest r;
  r.mutable_a()->add_shape(3);
  r.mutable_a()->add_shape(300);
  r.mutable_a()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  r.mutable_a()->set_data(Bytes(3 * 300 * 4, 1));
  r.mutable_b()->add_shape(300);
  r.mutable_b()->add_shape(2);
  r.mutable_b()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  r.mutable_b()->set_data(Bytes(300 * 2 * 4, 2));
  r.mutable_c()->add_shape(3);
  r.mutable_c()->add_shape(2);
  r.mutable_c()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  r.mutable_c()->set_data(Bytes(24, 3));
  r.set_alpha(0.5f);
  r.set_beta(-2.0f);
  r.set_alpha_f64(1.0 / 3.0);  // fixed64: split by every slicing below too
  r.set_beta_f64(-1e-300);
  r.set_transpose_a(true);
  r.set_precision(gemm::v1::PRECISION_FP16_TENSOR);
  r.set_output_dtype(gemm::v1::DATA_TYPE_BFLOAT16);
  r.set_kernel("cpu_sgemm_openblas");
  return r;
}

// `full` encoded as a client sends it: its head, and its tensors' bytes referenced
// (`full` outlives the result).
EncodedMessage EncodeAroundItsTensors(const gemm::v1::MatmulRequest& full) {
  gemm::v1::MatmulRequest head = full;
  head.mutable_a()->clear_data();
  head.mutable_b()->clear_data();
  head.mutable_c()->clear_data();
  return EncodeMatmulRequest(head, full.a().data(), full.b().data(), full.c().data());
}

// The parsed head plus its payloads put back together: the message it stands for.
gemm::v1::MatmulRequest Reassembled(const MatmulRequestWire& w) {
  gemm::v1::MatmulRequest r = w.head;
  if (r.has_a()) r.mutable_a()->set_data(Joined(w.a_data));
  if (r.has_b()) r.mutable_b()->set_data(Joined(w.b_data));
  if (r.has_c()) r.mutable_c()->set_data(Joined(w.c_data));
  return r;
}

TEST(GemmWireTest, ReadsTheGeneratedSerializationWhateverTheSlicing) {
  const gemm::v1::MatmulRequest request = FullMatmul();
  const std::string wire = request.SerializeAsString();
  for (std::vector<size_t> sizes : std::vector<std::vector<size_t>>{
           {wire.size()}, {1}, {7, 1, 3}, {4096}, {100, 5000}}) {
    MatmulRequestWire parsed;
    ASSERT_TRUE(ParseMatmulRequest(Split(wire, sizes), &parsed).ok());
    EXPECT_TRUE(parsed.head.a().data().empty());  // payloads stay out of the head
    EXPECT_TRUE(MessageDifferencer::Equals(Reassembled(parsed), request))
        << "slices of " << sizes[0];
  }
  // The payloads are views into the received pieces, not copies.
  MatmulRequestWire parsed;
  ASSERT_TRUE(ParseMatmulRequest(ByteRuns(wire), &parsed).ok());
  ASSERT_TRUE(parsed.a_data.Contiguous().has_value());
  EXPECT_GE(parsed.a_data.Contiguous()->data(), wire.data());
  EXPECT_LT(parsed.a_data.Contiguous()->data(), wire.data() + wire.size());
}

TEST(GemmWireTest, ReadsFieldsInAnyOrderUnpackedShapesAndSkipsUnknownFields) {
  const gemm::v1::MatmulRequest expected = FullMatmul();
  // Hand-written: scalars first, b before a, data before shape, shapes unpacked (one
  // varint per entry), unknown fields of every wire type at both levels.
  auto tag = [](uint32_t field, uint32_t type) {
    std::string s;
    AppendVarint(&s, field << 3 | type);
    return s;
  };
  auto unknowns = [&] {
    std::string s = tag(99, 0);
    AppendVarint(&s, 12345);
    s += tag(100, 1) + std::string(8, 'x');
    s += tag(101, 5) + std::string(4, 'y');
    s += tag(102, 2);
    AppendVarint(&s, 3);
    s += "zzz";
    return s;
  };
  auto tensor = [&](const gemm::v1::Tensor& t) {
    std::string body = unknowns();
    body += tag(3, 2);
    AppendVarint(&body, t.data().size());
    body += t.data();
    for (int64_t d : t.shape()) {
      body += tag(1, 0);
      AppendVarint(&body, static_cast<uint64_t>(d));
    }
    body += tag(2, 0);
    AppendVarint(&body, static_cast<uint64_t>(t.dtype()));
    return body;
  };
  gemm::v1::MatmulRequest scalars = expected;
  scalars.clear_a();
  scalars.clear_b();
  scalars.clear_c();
  std::string wire = scalars.SerializeAsString() + unknowns();
  for (auto [field, t] : {std::pair{2u, &expected.b()}, {1u, &expected.a()}, {3u, &expected.c()}}) {
    const std::string body = tensor(*t);
    AppendLengthDelimitedHead(&wire, field, body.size());
    wire += body;
  }
  MatmulRequestWire parsed;
  const absl::Status s = ParseMatmulRequest(Split(wire, {5, 64, 1}), &parsed);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(MessageDifferencer::Equals(Reassembled(parsed), expected));
  // The generated parser agrees that these bytes are that message.
  gemm::v1::MatmulRequest generated;
  ASSERT_TRUE(generated.ParseFromString(wire));
  generated.DiscardUnknownFields();
  EXPECT_TRUE(MessageDifferencer::Equals(generated, expected));
}

TEST(GemmWireTest, EncodersWriteWhatTheGeneratedParserReads) {
  const gemm::v1::MatmulRequest full = FullMatmul();
  const EncodedMessage encoded = EncodeAroundItsTensors(full);
  // The payloads are referenced, not copied.
  int payloads = 0;
  for (const EncodedMessage::Piece& p : encoded.pieces()) {
    if (p.is_payload) {
      ++payloads;
      EXPECT_TRUE(p.payload.data() == full.a().data().data() ||
                  p.payload.data() == full.b().data().data() ||
                  p.payload.data() == full.c().data().data());
    }
  }
  EXPECT_EQ(payloads, 3);
  gemm::v1::MatmulRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(encoded.Flatten()));
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, full));
  EXPECT_EQ(encoded.size(), full.ByteSizeLong());

  gemm::v1::QuantizedMatmulRequest q;
  q.mutable_a()->add_shape(2);
  q.mutable_a()->add_shape(32);
  q.mutable_a()->set_format(gemm::v1::QUANT_FORMAT_INT8);
  q.mutable_b()->add_shape(4);
  q.mutable_b()->add_shape(32);
  q.mutable_b()->set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  q.mutable_b()->set_tensor_scale(0.25f);
  q.set_kernel("k");
  const std::string a = Bytes(64, 4), a_s = Bytes(8, 5), b = Bytes(64, 6), b_s = Bytes(8, 7);
  gemm::v1::QuantizedMatmulRequest q_full = q;
  q_full.mutable_a()->set_data(a);
  q_full.mutable_a()->set_scales(a_s);
  q_full.mutable_b()->set_data(b);
  q_full.mutable_b()->set_scales(b_s);
  const EncodedMessage q_encoded = EncodeQuantizedMatmulRequest(q, {a, a_s, {}, b, b_s});
  gemm::v1::QuantizedMatmulRequest q_parsed;
  ASSERT_TRUE(q_parsed.ParseFromString(q_encoded.Flatten()));
  EXPECT_TRUE(MessageDifferencer::Equals(q_parsed, q_full));
  // And the wire parser reads it back.
  const std::string q_bytes = q_encoded.Flatten();  // the runs point into it
  QuantizedMatmulRequestWire q_wire;
  ASSERT_TRUE(ParseQuantizedMatmulRequest(Split(q_bytes, {3}), &q_wire).ok());
  EXPECT_EQ(Joined(q_wire.b_scales), b_s);
  EXPECT_EQ(Joined(q_wire.a_data), a);
  EXPECT_EQ(q_wire.head.b().tensor_scale(), 0.25f);
  EXPECT_EQ(q_wire.head.kernel(), "k");

  gemm::v1::MatmulResponse response;
  response.mutable_c()->add_shape(2);
  response.mutable_c()->add_shape(3);
  response.mutable_c()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  response.set_kernel("cpu_sgemm_openblas");
  response.set_device("cpu:0");
  response.mutable_timing()->set_compute_us(7);
  response.set_precision(gemm::v1::PRECISION_FP32);
  const std::string c = Bytes(24, 8);
  gemm::v1::MatmulResponse rest = response;
  rest.clear_c();
  const EncodedMessage r_encoded = EncodeMatmulResponse(response.c(), c, rest);
  const std::string r_bytes = r_encoded.Flatten();
  MatmulResponseWire r_wire;
  ASSERT_TRUE(ParseMatmulResponse(Split(r_bytes, {2, 9}), &r_wire).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(r_wire.head, response));
  EXPECT_EQ(Joined(r_wire.c_data), c);
  gemm::v1::MatmulResponse r_generated;
  ASSERT_TRUE(r_generated.ParseFromString(r_encoded.Flatten()));
  EXPECT_EQ(r_generated.c().data(), c);
}

absl::Status ParseBytes(const std::string& wire) {
  MatmulRequestWire parsed;
  return ParseMatmulRequest(Split(wire, {3}), &parsed);
}

TEST(GemmWireTest, RefusesMalformedInputNamingTheField) {
  const std::string good = FullMatmul().SerializeAsString();
  // Cut inside a's data: its length claims more than remains.
  absl::Status s = ParseBytes(good.substr(0, 100));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a valid gemm.v1.MatmulRequest"));
  EXPECT_THAT(s.message(), HasSubstr("a"));
  EXPECT_THAT(s.message(), HasSubstr("remain"));

  // a's data twice (inside one a).
  std::string twice;
  {
    std::string body;
    AppendLengthDelimitedHead(&body, 3, 4);
    body += "abcd";
    body += body;
    AppendLengthDelimitedHead(&twice, 1, body.size());
    twice += body;
  }
  s = ParseBytes(twice);
  EXPECT_THAT(s.message(), HasSubstr("a.data (field 3) appears twice"));

  // b twice at the top level.
  std::string b_twice;
  AppendLengthDelimitedHead(&b_twice, 2, 0);
  AppendLengthDelimitedHead(&b_twice, 2, 0);
  EXPECT_THAT(ParseBytes(b_twice).message(), HasSubstr("b (field 2) appears twice"));

  // dtype sent as a length-delimited field.
  std::string wrong_type;
  {
    std::string body;
    AppendLengthDelimitedHead(&body, 2, 1);
    body += "x";
    AppendLengthDelimitedHead(&wrong_type, 1, body.size());
    wrong_type += body;
  }
  EXPECT_THAT(ParseBytes(wrong_type).message(),
              HasSubstr("a.dtype (field 2) has wire type length-delimited; expected varint"));

  // A nested length that runs past its parent (overlapping fields).
  std::string overlap;
  {
    std::string body;
    AppendLengthDelimitedHead(&body, 3, 50);  // claims 50 inside a body of 2 + 4
    body += "abcd";
    AppendLengthDelimitedHead(&overlap, 1, body.size());
    overlap += body + std::string(60, 'q');
  }
  EXPECT_THAT(ParseBytes(overlap).message(), HasSubstr("a.data at byte"));

  // A varint of 11 bytes, a group, a field number 0.
  EXPECT_THAT(ParseBytes(std::string(11, '\xff')).message(), HasSubstr("not a valid varint"));
  EXPECT_THAT(ParseBytes("\x0b").message(), HasSubstr("group"));
  EXPECT_THAT(ParseBytes(std::string("\x00", 1)).message(), HasSubstr("invalid field tag"));

  // A tag or a length in more than five varint bytes (protobuf reads both as 32 bits).
  EXPECT_THAT(ParseBytes(std::string("\x8a\x80\x80\x80\x80\x00", 6) + std::string(1, '\0')).message(),
              HasSubstr("invalid field tag"));
  EXPECT_THAT(ParseBytes(std::string("\x0a\x80\x80\x80\x80\x80\x00", 7)).message(),
              HasSubstr("is not a 32-bit size"));

  // A shape longer than any operand's.
  std::string long_shape;
  {
    std::string body;
    for (int i = 0; i < kMaxShapeEntries + 1; ++i) body += std::string("\x08\x01", 2);
    AppendLengthDelimitedHead(&long_shape, 2, body.size());
    long_shape += body;
  }
  EXPECT_THAT(ParseBytes(long_shape).message(), HasSubstr("b.shape has more than 16 entries"));

  // Both halves of the a_operand oneof.
  std::string both;
  AppendLengthDelimitedHead(&both, 1, 0);
  AppendLengthDelimitedHead(&both, 2, 0);
  QuantizedMatmulRequestWire q;
  EXPECT_THAT(ParseQuantizedMatmulRequest(ByteRuns(both), &q).message(),
              HasSubstr("a and a_dense are both set"));
}

// Every prefix of a valid message is either refused or parses as a message whose
// payloads are prefixes of the originals; nothing reads past the end (the fuzz target,
// tests/fuzz, does this for arbitrary bytes).
TEST(GemmWireTest, EveryTruncationIsHandled) {
  const std::string good = FullMatmul().SerializeAsString();
  for (size_t n = 0; n < good.size(); n += 7) {
    MatmulRequestWire parsed;
    const std::string cut = good.substr(0, n);
    const absl::Status s = ParseMatmulRequest(Split(cut, {13}), &parsed);
    if (s.ok()) {
      gemm::v1::MatmulRequest generated;
      EXPECT_TRUE(generated.ParseFromString(cut)) << n;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

// MatmulStream's envelopes: the generated serialization parsed (the request inside left
// where it is), the encoders read by the generated parser, and the oneof refused twice.
TEST(StreamWireTest, RequestsBothWays) {
  gemm::v1::StreamRequest request;
  request.set_id(0xfedcba9876543210ull);
  request.set_timeout_us(2500);
  *request.mutable_matmul() = FullMatmul();
  const std::string wire = request.SerializeAsString();
  for (std::vector<size_t> sizes : std::vector<std::vector<size_t>>{{wire.size()}, {1}, {7, 3}}) {
    StreamRequestWire parsed;
    ASSERT_TRUE(ParseStreamRequest(Split(wire, sizes), &parsed).ok());
    EXPECT_EQ(parsed.id, request.id());
    EXPECT_EQ(parsed.timeout_us, 2500u);
    ASSERT_EQ(parsed.call, StreamCall::kMatmul);
    MatmulRequestWire inner;
    ASSERT_TRUE(ParseMatmulRequest(parsed.body, &inner).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(Reassembled(inner), request.matmul()));
  }

  const gemm::v1::MatmulRequest full = FullMatmul();
  const EncodedMessage body = EncodeAroundItsTensors(full);
  gemm::v1::StreamRequest generated;
  ASSERT_TRUE(generated.ParseFromString(
      EncodeStreamRequest(42, StreamCall::kMatmul, 0, body).Flatten()));
  EXPECT_EQ(generated.id(), 42u);
  EXPECT_EQ(generated.timeout_us(), 0u);
  EXPECT_TRUE(MessageDifferencer::Equals(generated.matmul(), full));
  // The tensors are referenced, not copied.
  const EncodedMessage wrapped = EncodeStreamRequest(43, StreamCall::kQuantized, 7, body);
  int payloads = 0;
  for (const EncodedMessage::Piece& piece : wrapped.pieces()) payloads += piece.is_payload;
  EXPECT_EQ(payloads, 3);
  ASSERT_TRUE(generated.ParseFromString(wrapped.Flatten()));
  EXPECT_EQ(generated.call_case(), gemm::v1::StreamRequest::kQuantized);
  EXPECT_EQ(generated.timeout_us(), 7u);
}

TEST(StreamWireTest, ResponsesBothWays) {
  gemm::v1::MatmulResponse result;
  result.mutable_c()->add_shape(2);
  result.mutable_c()->set_data(Bytes(8, 4));
  result.set_kernel("k");
  const std::string result_bytes = result.SerializeAsString();
  gemm::v1::StreamResponse generated;
  ASSERT_TRUE(generated.ParseFromString(
      StreamResponseHead(9, 0, "", result_bytes.size()) + result_bytes));
  EXPECT_EQ(generated.id(), 9u);
  EXPECT_EQ(generated.code(), 0);
  EXPECT_TRUE(MessageDifferencer::Equals(generated.result(), result));
  ASSERT_TRUE(generated.ParseFromString(StreamResponseHead(10, 4, "too late", std::nullopt)));
  EXPECT_EQ(generated.code(), 4);
  EXPECT_EQ(generated.message(), "too late");
  EXPECT_FALSE(generated.has_result());

  gemm::v1::StreamResponse answer;
  answer.set_id(11);
  answer.set_code(-3);  // not a code any server sends, but an int32 protobuf may carry
  answer.set_message("m");
  *answer.mutable_result() = result;
  const std::string wire = answer.SerializeAsString();
  StreamResponseWire parsed;
  ASSERT_TRUE(ParseStreamResponse(Split(wire, {5}), &parsed).ok());
  EXPECT_EQ(parsed.id, 11u);
  EXPECT_EQ(parsed.code, -3);
  EXPECT_EQ(parsed.message, "m");
  ASSERT_TRUE(parsed.has_result);
  EXPECT_EQ(Joined(parsed.result), result_bytes);
}

TEST(StreamWireTest, RefusesMalformedEnvelopesNamingTheField) {
  std::string both;
  AppendLengthDelimitedHead(&both, 2, 0);
  AppendLengthDelimitedHead(&both, 3, 0);
  StreamRequestWire parsed;
  EXPECT_THAT(ParseStreamRequest(ByteRuns(both), &parsed).message(),
              HasSubstr("both matmul and quantized"));
  std::string twice;
  AppendVarint(&twice, 1 << 3);
  AppendVarint(&twice, 5);
  AppendVarint(&twice, 1 << 3);
  AppendVarint(&twice, 6);
  StreamRequestWire again;
  EXPECT_THAT(ParseStreamRequest(ByteRuns(twice), &again).message(), HasSubstr("id (field 1) appears twice"));
  std::string wrong_type;
  AppendLengthDelimitedHead(&wrong_type, 1, 0);
  StreamRequestWire typed;
  const absl::Status s = ParseStreamRequest(ByteRuns(wrong_type), &typed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("gemm.v1.StreamRequest"));
  EXPECT_THAT(s.message(), HasSubstr("id (field 1) has wire type length-delimited"));
  // No call at all parses (it is answered by id).
  gemm::v1::StreamRequest empty;
  empty.set_id(3);
  StreamRequestWire bare;
  ASSERT_TRUE(ParseStreamRequest(ByteRuns(empty.SerializeAsString()), &bare).ok());
  EXPECT_EQ(bare.call, StreamCall::kNone);
  EXPECT_EQ(bare.id, 3u);
}

// Batches: several requests (answers) in one message, each element parsed on its own;
// the generated code reads what EncodeStreamBatch writes and the other way round.
TEST(StreamWireTest, BatchesBothWays) {
  gemm::v1::StreamRequest batched;
  for (uint64_t id : {5, 6, 7}) {
    gemm::v1::StreamRequest* one = batched.add_batch();
    one->set_id(id);
    *one->mutable_matmul() = FullMatmul();
  }
  const std::string wire = batched.SerializeAsString();
  StreamRequestWire parsed;
  ASSERT_TRUE(ParseStreamRequest(Split(wire, {9, 100}), &parsed).ok());
  EXPECT_EQ(parsed.call, StreamCall::kNone);
  ASSERT_EQ(parsed.batch.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    StreamRequestWire one;
    ASSERT_TRUE(ParseStreamRequest(parsed.batch[i], &one).ok());
    EXPECT_EQ(one.id, 5 + i);
    MatmulRequestWire inner;
    ASSERT_TRUE(ParseMatmulRequest(one.body, &inner).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(Reassembled(inner), FullMatmul()));
  }

  const gemm::v1::MatmulRequest full = FullMatmul();
  const EncodedMessage body = EncodeAroundItsTensors(full);
  const EncodedMessage encoded =
      EncodeStreamBatch({EncodeStreamRequest(1, StreamCall::kMatmul, 0, body),
                         EncodeStreamRequest(2, StreamCall::kMatmul, 9, body)});
  int payloads = 0;  // still referenced, not copied
  for (const EncodedMessage::Piece& piece : encoded.pieces()) payloads += piece.is_payload;
  EXPECT_EQ(payloads, 6);
  gemm::v1::StreamRequest generated;
  ASSERT_TRUE(generated.ParseFromString(encoded.Flatten()));
  ASSERT_EQ(generated.batch_size(), 2);
  EXPECT_EQ(generated.batch(1).id(), 2u);
  EXPECT_EQ(generated.batch(1).timeout_us(), 9u);
  EXPECT_TRUE(MessageDifferencer::Equals(generated.batch(0).matmul(), full));

  // Answers: a head plus its result, each behind its element head.
  const std::string ok_answer = StreamResponseHead(3, 0, "", 0);
  const std::string failed = StreamResponseHead(4, 8, "full", std::nullopt);
  gemm::v1::StreamResponse answers;
  ASSERT_TRUE(answers.ParseFromString(StreamBatchElementHead(ok_answer.size()) + ok_answer +
                                      StreamBatchElementHead(failed.size()) + failed));
  ASSERT_EQ(answers.batch_size(), 2);
  EXPECT_EQ(answers.batch(0).id(), 3u);
  EXPECT_TRUE(answers.batch(0).has_result());
  EXPECT_EQ(answers.batch(1).code(), 8);
  const std::string answers_wire = answers.SerializeAsString();
  StreamResponseWire read;
  ASSERT_TRUE(ParseStreamResponse(Split(answers_wire, {3}), &read).ok());
  ASSERT_EQ(read.batch.size(), 2u);
  StreamResponseWire second;
  ASSERT_TRUE(ParseStreamResponse(read.batch[1], &second).ok());
  EXPECT_EQ(second.id, 4u);
  EXPECT_EQ(second.message, "full");
}

TEST(StreamWireTest, RefusesABatchTooLargeOrBesideARequestOfItsOwn) {
  gemm::v1::StreamRequest mixed;
  mixed.set_id(1);
  mixed.add_batch()->set_id(2);
  StreamRequestWire parsed;
  const absl::Status s = ParseStreamRequest(ByteRuns(mixed.SerializeAsString()), &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("carries no request of its own"));
  gemm::v1::StreamRequest many;
  for (size_t i = 0; i <= kMaxStreamBatch; ++i) many.add_batch()->set_id(i + 1);
  StreamRequestWire too_many;
  EXPECT_THAT(ParseStreamRequest(ByteRuns(many.SerializeAsString()), &too_many).message(),
              HasSubstr("batch has more than 256 elements"));
  many.mutable_batch()->RemoveLast();
  StreamRequestWire most;
  ASSERT_TRUE(ParseStreamRequest(ByteRuns(many.SerializeAsString()), &most).ok());
  EXPECT_EQ(most.batch.size(), kMaxStreamBatch);
  std::string wrong_type;
  AppendVarint(&wrong_type, 5 << 3);
  AppendVarint(&wrong_type, 1);
  StreamRequestWire typed;
  EXPECT_THAT(ParseStreamRequest(ByteRuns(wrong_type), &typed).message(),
              HasSubstr("batch (field 5) has wire type varint"));
}

}  // namespace
}  // namespace gemmd::wire
