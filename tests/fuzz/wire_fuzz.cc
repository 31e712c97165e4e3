// libFuzzer target: the hand-written wire parsers (proto/wire/gemm_wire.h) on arbitrary
// bytes, split into separately allocated pieces as gRPC hands them over, so AddressSanitizer
// sees any read past a piece. The first byte picks the piece size. Checks, beyond "no
// crash": payload views stay inside the input, and whatever the wire parser accepts the
// generated protobuf parser accepts too, as the same message (Matmul requests, PutTensor
// chunks, MatmulStream's envelopes and the Matmul request inside one).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "google/protobuf/stubs/common.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/wire/gemm_wire.h"
#include "proto/wire/stream_wire.h"

namespace {

using gemmd::wire::ByteRuns;

std::string Joined(const ByteRuns& runs) {
  std::string s(runs.size(), '\0');
  runs.CopyTo(s.data());
  return s;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

// Field by field, a NaN equal to a NaN (alpha and beta may be any float on the wire).
bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  return differencer.Compare(a, b);
}

bool ValidUtf8(const std::string& s) {
  return google::protobuf::internal::IsStructurallyValidUTF8(s.data(), static_cast<int>(s.size()));
}

}  // namespace

// The generated parser logs every non-UTF-8 kernel name it refuses; quiet it.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = data[0] % 64 + 1;
  const std::string whole(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> pieces;
  for (size_t at = 0; at < whole.size(); at += piece) pieces.push_back(whole.substr(at, piece));
  ByteRuns runs;
  for (const std::string& p : pieces) runs.Append(p);

  gemmd::wire::MatmulRequestWire matmul;
  if (gemmd::wire::ParseMatmulRequest(runs, &matmul).ok()) {
    Check(matmul.a_data.size() + matmul.b_data.size() + matmul.c_data.size() <= whole.size());
    gemm::v1::MatmulRequest generated;
    const bool parsed = generated.ParseFromString(whole);
    // proto3 refuses a kernel name that is not UTF-8; the service reports it as unknown.
    Check(parsed || !ValidUtf8(matmul.head.kernel()));
    if (parsed) {
      gemm::v1::MatmulRequest ours = matmul.head;
      if (ours.has_a()) ours.mutable_a()->set_data(Joined(matmul.a_data));
      if (ours.has_b()) ours.mutable_b()->set_data(Joined(matmul.b_data));
      if (ours.has_c()) ours.mutable_c()->set_data(Joined(matmul.c_data));
      // Unknown fields inside small nested messages (a handle) stay in ours.
      generated.DiscardUnknownFields();
      ours.DiscardUnknownFields();
      Check(SameMessage(ours, generated));
    }
  }
  gemmd::wire::QuantizedMatmulRequestWire quantized;
  if (gemmd::wire::ParseQuantizedMatmulRequest(runs, &quantized).ok()) {
    Check(quantized.a_data.size() + quantized.a_scales.size() + quantized.a_dense_data.size() +
              quantized.b_data.size() + quantized.b_scales.size() <=
          whole.size());
    gemm::v1::QuantizedMatmulRequest generated;
    Check(generated.ParseFromString(whole) || !ValidUtf8(quantized.head.kernel()));
  }
  gemmd::wire::MatmulResponseWire response;
  if (gemmd::wire::ParseMatmulResponse(runs, &response).ok()) {
    Check(response.c_data.size() <= whole.size());
  }
  // PutTensor's chunks: what the wire parser accepts, the generated one reads the same.
  gemmd::wire::TensorChunkWire chunk;
  if (gemmd::wire::ParseTensorChunk(runs, &chunk).ok()) {
    Check(chunk.data.size() + chunk.scales.size() <= whole.size());
    gemm::v1::TensorChunk generated;
    const bool parsed = generated.ParseFromString(whole);
    Check(parsed || !ValidUtf8(chunk.header.label()) ||
          !ValidUtf8(chunk.header.part_of().handle()));
    if (parsed) {
      gemm::v1::TensorChunk ours;
      if (chunk.has_header) *ours.mutable_header() = chunk.header;
      ours.set_data(Joined(chunk.data));
      ours.set_scales(Joined(chunk.scales));
      if (chunk.has_data_shm) *ours.mutable_data_shm() = chunk.data_shm;
      if (chunk.has_scales_shm) *ours.mutable_scales_shm() = chunk.scales_shm;
      generated.DiscardUnknownFields();
      ours.DiscardUnknownFields();
      Check(SameMessage(ours, generated));
    }
  }
  // MatmulStream's envelopes: the same id, timeout and call as the generated parser reads,
  // and the request inside parsed as the server parses it.
  gemmd::wire::StreamRequestWire stream;
  if (gemmd::wire::ParseStreamRequest(runs, &stream).ok()) {
    Check(stream.body.size() <= whole.size());
    gemm::v1::StreamRequest generated;
    if (generated.ParseFromString(whole)) {
      Check(generated.id() == stream.id && generated.timeout_us() == stream.timeout_us);
      Check(static_cast<size_t>(generated.batch_size()) == stream.batch.size());
      Check(static_cast<int>(generated.call_case()) ==
            (stream.call == gemmd::wire::StreamCall::kMatmul      ? 2
             : stream.call == gemmd::wire::StreamCall::kQuantized ? 3
                                                                  : 0));
    }
    gemmd::wire::MatmulRequestWire inner;
    if (stream.call == gemmd::wire::StreamCall::kMatmul &&
        gemmd::wire::ParseMatmulRequest(stream.body, &inner).ok()) {
      Check(inner.a_data.size() + inner.b_data.size() + inner.c_data.size() <=
            stream.body.size());
    }
    // A batch's elements, each parsed as the server parses it.
    Check(stream.batch.size() <= gemmd::wire::kMaxStreamBatch);
    for (const gemmd::wire::ByteRuns& element : stream.batch) {
      gemmd::wire::StreamRequestWire one;
      if (gemmd::wire::ParseStreamRequest(element, &one).ok()) {
        Check(one.body.size() <= element.size());
      }
    }
  }
  gemmd::wire::StreamResponseWire answer;
  if (gemmd::wire::ParseStreamResponse(runs, &answer).ok()) {
    Check(answer.result.size() <= whole.size());
    gemm::v1::StreamResponse generated;
    const bool parsed = generated.ParseFromString(whole);
    // Ours leaves the result and a batch's elements to be parsed on their own.
    Check(parsed || !ValidUtf8(answer.message) || answer.has_result || !answer.batch.empty());
    if (parsed) {
      Check(generated.id() == answer.id && generated.code() == answer.code &&
            generated.message() == answer.message &&
            generated.has_result() == answer.has_result &&
            static_cast<size_t>(generated.batch_size()) == answer.batch.size());
    }
  }
  return 0;
}
