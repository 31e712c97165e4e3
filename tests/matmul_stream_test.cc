// MatmulStream (server/rpc/matmul_stream_call.h, client/matmul_stream.h) against a whole
// server in-process: many requests on one stream answered by id and checked against the
// FP64 reference (dense, batched, beta != 0, quantized); answers as requests complete,
// each with its own status (a bad request among good ones ends nothing); per-request
// deadlines; a device fault with a stream's requests on it and queued (each answered, the
// drain still ends); a stream that never reads its answers held at --stream_max_outstanding;
// cancelling a stream drops its queued jobs and gives every byte back; a drain answers
// what was read and ends the stream OK, failing what it never read UNAVAILABLE; metrics
// count each request and each stream as the client saw them.
#include "client/matmul_stream.h"

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/gemm_client.h"
#include "client/request_encoding.h"
#include "kernels/reference_gemm.h"
#include "proto/wire/stream_wire.h"
#include "server/observability/metrics.h"
#include "server/rpc/host_memory.h"
#include "server/scheduling/batcher.h"
#include "tests/client_calls.h"
#include "tests/server_fixture.h"

namespace gemmd::testing {
namespace {

// C = A[m,k] * B[k,n] (FP32, N(0,1)) with its operands, and the FP64 reference.
struct Fp32Call {
  int64_t m = 0, n = 0, k = 0;
  std::string a, b;
  MatmulArgs args;
  MatmulResult result;
  absl::Status status = absl::UnknownError("not answered");

  Fp32Call(int64_t m_, int64_t n_, int64_t k_, uint64_t seed) : m(m_), n(n_), k(k_) {
    a = Random(DataType::kFloat32, m * k, seed);
    b = Random(DataType::kFloat32, k * n, seed + 1);
    args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT32, a};
    args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, b};
  }

  double Error() const {
    GemmProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    GemmOperands ops;
    ops.a = a.data();
    ops.b = b.data();
    const std::vector<double> ref = ReferenceGemm(p, ops);
    return RelativeError(ref.data(), result.c().data(), DataType::kFloat32, m * n);
  }
};

double Scraped(GemmServer& server, const std::string& series) {
  return ScrapedValue(HttpGet(server.metrics_port(), "/metrics"), series);
}

// A MatmulStream driven by hand on a completion queue, one operation at a time: raw
// bytes in and out, as a client that misbehaves (or is not ours) sends them.
struct RawStream {
  explicit RawStream(const std::shared_ptr<grpc::Channel>& channel) : stub(channel) {
    call = stub.PrepareCall(&context, "/gemm.v1.GemmService/MatmulStream", &cq);
    call->StartCall(this);
    started = Await();
  }
  ~RawStream() {
    context.TryCancel();
    cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
  }
  bool Await() {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  }
  bool Write(const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, this);
    return Await();
  }
  bool Read(std::string* bytes) {
    grpc::ByteBuffer buffer;
    call->Read(&buffer, this);
    std::vector<grpc::Slice> slices;
    if (!Await() || !buffer.Dump(&slices).ok()) return false;
    bytes->clear();
    for (const grpc::Slice& s : slices) {
      bytes->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return true;
  }
  // Reads messages until `n` answers have come (a message may carry a batch of them):
  // each answer's StreamResponse bytes. False when the stream ends first.
  bool ReadAnswers(size_t n, std::vector<std::string>* answers) {
    while (answers->size() < n) {
      std::string bytes;
      if (!Read(&bytes)) return false;
      wire::StreamResponseWire message;
      if (!wire::ParseStreamResponse(wire::ByteRuns(bytes), &message).ok()) return false;
      if (message.batch.empty()) {
        answers->push_back(std::move(bytes));
        continue;
      }
      for (const wire::ByteRuns& element : message.batch) {
        std::string one(element.size(), '\0');
        element.CopyTo(one.data());
        answers->push_back(std::move(one));
      }
    }
    return true;
  }
  grpc::Status Close() {
    call->WritesDone(this);
    Await();
    grpc::Status status;
    call->Finish(&status, this);
    Await();
    return status;
  }

  grpc::GenericStub stub;
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  bool started = false;
};

class MatmulStreamTest : public InProcessServerTest {
 protected:
  // A server on a gated FakeDevice (C = the problem's m everywhere).
  FakeDevice* StartGated(ServerConfig config = TestConfig()) {
    auto device = std::make_unique<FakeDevice>(/*gated=*/true);
    FakeDevice* fake = device.get();
    Start(config, std::move(device));
    return fake;
  }
};

TEST_F(MatmulStreamTest, ManyRequestsFromTwoThreadsMatchTheFp64Reference) {
  ServerConfig config = TestConfig();
  config.metrics_port = 0;
  Start(config);
  constexpr int kCalls = 240;
  std::mt19937_64 rng(TestSeed(5));
  std::uniform_int_distribution<int64_t> size(1, 48);
  std::vector<std::unique_ptr<Fp32Call>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<Fp32Call>(size(rng), size(rng), size(rng), 100 + 2 * i));
  }
  StreamOptions options;
  options.max_outstanding = 16;
  MatmulStream stream(channel_, options);
  std::atomic<int> answered{0};
  auto submit_from = [&](int first) {
    for (int i = first; i < kCalls; i += 2) {
      Fp32Call* call = calls[i].get();
      stream.Submit(call->args, {}, &call->result, [call, &answered](absl::Status s) {
        call->status = std::move(s);
        answered.fetch_add(1);
      });
      EXPECT_LE(stream.outstanding(), options.max_outstanding);
    }
  };
  std::thread other(submit_from, 1);
  submit_from(0);
  other.join();
  const absl::Status closed = stream.Close();
  ASSERT_TRUE(closed.ok()) << closed;
  ASSERT_EQ(answered.load(), kCalls);
  for (const auto& call : calls) {
    ASSERT_TRUE(call->status.ok()) << call->status;
    ASSERT_EQ(call->result.c().size(), static_cast<size_t>(call->m * call->n * 4));
    EXPECT_EQ(call->result.info().c().shape(0), call->m);
    EXPECT_EQ(call->result.info().c().shape(1), call->n);
    EXPECT_LT(call->Error(), 1e-5) << call->m << "x" << call->n << "x" << call->k;
  }
  // Counted as the client saw them: each request as a Matmul and a stream request, the
  // stream once; nothing left open or held.
  ASSERT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(Scraped(*server_, "gemm_stream_requests_total{code=\"OK\"}"), kCalls);
  EXPECT_EQ(Scraped(*server_,
                    "gemm_requests_total{code=\"OK\",method=\"Matmul\",precision=\"FP32\"}"),
            kCalls);
  EXPECT_EQ(Scraped(*server_,
                    "gemm_requests_total{code=\"OK\",method=\"MatmulStream\",precision=\"NONE\"}"),
            1);
  EXPECT_EQ(Scraped(*server_, "gemm_open_streams"), 0);
  EXPECT_EQ(Scraped(*server_, "gemm_inflight_requests"), 0);
  // Results' memory goes as gRPC lets go of the slices it sent.
  EXPECT_TRUE(Eventually([&] { return server_->memory().reserved_bytes() == 0; }))
      << server_->memory().reserved_bytes() << " bytes still reserved";
}

TEST_F(MatmulStreamTest, BatchedBetaAndQuantizedRequestsEqualTheirUnaryCalls) {
  Start();
  GemmClient client(channel_);
  MatmulStream stream(channel_);
  // Batched A against a shared B, with beta != 0 and a transposed B.
  const int64_t batch = 3, m = 17, k = 33, n = 9;
  const std::string a = Random(DataType::kFloat32, batch * m * k, 1);
  const std::string b = Random(DataType::kFloat32, n * k, 2);
  const std::string c = Random(DataType::kFloat32, batch * m * n, 3);
  MatmulArgs dense;
  dense.a = {{batch, m, k}, gemm::v1::DATA_TYPE_FLOAT32, a};
  dense.b = {{n, k}, gemm::v1::DATA_TYPE_FLOAT32, b};
  dense.c = TensorRef{{batch, m, n}, gemm::v1::DATA_TYPE_FLOAT32, c};
  dense.transpose_b = true;
  dense.beta = 0.75f;
  const std::unique_ptr<QuantizedCalls> q = MakeQuantizedCalls(24, 40, 64);

  MatmulResult unary_dense, unary_int8, unary_nvfp4;
  ASSERT_TRUE(client.Matmul(dense, {}, &unary_dense).ok());
  ASSERT_TRUE(client.QuantizedMatmul(q->int8, {}, &unary_int8).ok());
  ASSERT_TRUE(client.QuantizedMatmul(q->nvfp4, {}, &unary_nvfp4).ok());

  MatmulResult streamed_dense, streamed_int8, streamed_nvfp4;
  std::vector<char> c_out(batch * m * n * 4);
  StreamCallOptions into;
  into.c_out = absl::MakeSpan(c_out);
  std::future<absl::Status> f1 = stream.Submit(dense, into, &streamed_dense);
  std::future<absl::Status> f2 = stream.Submit(q->int8, {}, &streamed_int8);
  std::future<absl::Status> f3 = stream.Submit(q->nvfp4, {}, &streamed_nvfp4);
  ASSERT_TRUE(f1.get().ok());
  ASSERT_TRUE(f2.get().ok());
  ASSERT_TRUE(f3.get().ok());
  EXPECT_EQ(streamed_dense.c().data(), c_out.data());
  EXPECT_EQ(streamed_dense.c(), unary_dense.c());
  EXPECT_EQ(streamed_int8.c(), unary_int8.c());
  EXPECT_EQ(streamed_nvfp4.c(), unary_nvfp4.c());
  EXPECT_EQ(streamed_nvfp4.info().kernel(), unary_nvfp4.info().kernel());
  EXPECT_TRUE(stream.Close().ok());
}

TEST_F(MatmulStreamTest, AnswersComeAsRequestsCompleteEachWithItsOwnStatus) {
  ServerConfig config = TestConfig();
  config.metrics_port = 0;
  FakeDevice* fake = StartGated(config);
  MatmulStream stream(channel_);
  Fp32Call held(3, 2, 2, 1), bad(4, 2, 2, 3), queued(5, 2, 2, 5);
  bad.args.b.shape = {3, 2};  // K = 3 does not match A's 2
  absl::Mutex mu;
  std::vector<int64_t> order;  // m of each answer, as answered
  auto record = [&](Fp32Call* call) {
    return [&, call](absl::Status s) {
      call->status = std::move(s);
      absl::MutexLock lock(&mu);
      order.push_back(call->m);
    };
  };
  stream.Submit(held.args, {}, &held.result, record(&held));
  fake->AwaitStarted(1);  // the device holds it
  stream.Submit(bad.args, {}, &bad.result, record(&bad));
  stream.Submit(queued.args, {}, &queued.result, record(&queued));
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(+[](std::vector<int64_t>* o) { return !o->empty(); }, &order));
    EXPECT_EQ(order, std::vector<int64_t>{4});  // answered while the first is still held
  }
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status.message(), "b.data has 16 bytes; shape [3,2] FLOAT32 needs 24");
  fake->Open();
  ASSERT_TRUE(stream.Close().ok());
  ASSERT_TRUE(held.status.ok()) << held.status;
  ASSERT_TRUE(queued.status.ok()) << queued.status;
  // Each answer reached its own request: the fake device writes m into C.
  EXPECT_EQ(held.result.c().size(), 3u * 2 * 4);
  float value = 0;
  std::memcpy(&value, held.result.c().data(), 4);
  EXPECT_EQ(value, 3.0f);
  std::memcpy(&value, queued.result.c().data(), 4);
  EXPECT_EQ(value, 5.0f);
  ASSERT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(Scraped(*server_, "gemm_stream_requests_total{code=\"OK\"}"), 2);
  EXPECT_EQ(Scraped(*server_, "gemm_stream_requests_total{code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(Scraped(*server_, "gemm_requests_total{code=\"INVALID_ARGUMENT\",method=\"Matmul\","
                              "precision=\"NONE\"}"),
            1);
}

TEST_F(MatmulStreamTest, ARequestPastItsOwnDeadlineIsAnsweredSoAndTheStreamGoesOn) {
  FakeDevice* fake = StartGated();
  MatmulStream stream(channel_);
  Fp32Call held(3, 2, 2, 1), late(6, 2, 2, 3), after(7, 2, 2, 5);
  std::future<absl::Status> h = stream.Submit(held.args, {}, &held.result);
  fake->AwaitStarted(1);
  StreamCallOptions short_deadline;
  short_deadline.timeout = absl::Milliseconds(100);
  std::future<absl::Status> l = stream.Submit(late.args, short_deadline, &late.result);
  absl::SleepFor(absl::Milliseconds(300));  // `late` waits in the queue past its deadline
  fake->Open();
  EXPECT_TRUE(h.get().ok());
  const absl::Status s = l.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(stream.Submit(after.args, {}, &after.result).get().ok());
  EXPECT_TRUE(stream.Close().ok());
  EXPECT_EQ(fake->ran_m(), (std::vector<int64_t>{3, 7}));  // `late` never reached it
}

// A device that faults with a stream's requests on it and in its queue: each of them is
// answered with the fault's status, the stream stays open (a request after it is refused
// alone: no device serves), and a drain then ends the stream and the server.
TEST_F(MatmulStreamTest, ADeviceFaultAnswersEveryRequestAndADrainStillEnds) {
  FakeDevice* fake = StartGated();
  MatmulStream stream(channel_);
  Fp32Call held(3, 2, 2, 1), queued(4, 2, 2, 3), after(5, 2, 2, 5);
  std::future<absl::Status> h = stream.Submit(held.args, {}, &held.result);
  fake->AwaitStarted(1);
  std::future<absl::Status> q = stream.Submit(queued.args, {}, &queued.result);
  ASSERT_TRUE(Eventually([&] { return server_->metrics().inflight() == 2; }));
  fake->FailWith(absl::InternalError("CUDA error: injected fault"), /*fault=*/true);
  fake->Open();
  const absl::Status sh = h.get();
  EXPECT_EQ(sh.code(), absl::StatusCode::kInternal) << sh;
  EXPECT_EQ(sh.message(), "CUDA error: injected fault");
  // The queued one failed with the launch it was in, or found no healthy device left.
  const absl::Status sq = q.get();
  EXPECT_TRUE(sq.code() == absl::StatusCode::kInternal ||
              sq.code() == absl::StatusCode::kUnavailable)
      << sq;
  const absl::Status sa = stream.Submit(after.args, {}, &after.result).get();
  EXPECT_EQ(sa.code(), absl::StatusCode::kUnavailable) << sa;
  EXPECT_TRUE(absl::StrContains(sa.message(), "no healthy device")) << sa;
  std::future<void> shutdown = std::async(std::launch::async, [&] { server_->Shutdown(); });
  ASSERT_EQ(shutdown.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the drain did not end with a stream open on a faulted device";
  stream.Close().IgnoreError();  // OK, or UNAVAILABLE when the drain ended it first
  EXPECT_EQ(server_->metrics().inflight(), 0);
}

TEST_F(MatmulStreamTest, AMalformedRequestIsAnsweredByIdAndOthersGoOn) {
  Start();
  RawStream raw(channel_);
  ASSERT_TRUE(raw.started);
  // id 7 with a matmul that is not a MatmulRequest; id 8 with no call; garbage (no id);
  // then a good one, id 9.
  gemm::v1::StreamRequest broken;
  broken.set_id(7);
  std::string bytes = broken.SerializeAsString();
  bytes += std::string("\x12\x03\xff\xff\xff", 5);  // matmul: 3 bytes of nonsense
  ASSERT_TRUE(raw.Write(bytes));
  gemm::v1::StreamRequest empty;
  empty.set_id(8);
  ASSERT_TRUE(raw.Write(empty.SerializeAsString()));
  ASSERT_TRUE(raw.Write(std::string("\xff\xff\xff\xff", 4)));
  Fp32Call good(2, 3, 4, 1);
  ASSERT_TRUE(raw.Write(
      wire::EncodeStreamRequest(9, wire::StreamCall::kMatmul, 0, EncodeMatmulArgs(good.args))
          .Flatten()));
  std::vector<std::pair<uint64_t, int32_t>> answers;
  std::vector<std::string> read;
  ASSERT_TRUE(raw.ReadAnswers(4, &read));
  for (const std::string& keep : read) {
    wire::StreamResponseWire answer;
    ASSERT_TRUE(wire::ParseStreamResponse(wire::ByteRuns(keep), &answer).ok());
    answers.emplace_back(answer.id, answer.code);
    if (answer.id == 7) EXPECT_TRUE(absl::StrContains(answer.message, "MatmulRequest")) << answer.message;
    if (answer.id == 8) EXPECT_TRUE(absl::StrContains(answer.message, "no call")) << answer.message;
    if (answer.id == 9) {
      EXPECT_TRUE(answer.has_result);
      ASSERT_TRUE(ReadMatmulResponse(answer.result, {}, false, &good.result).ok());
      EXPECT_LT(good.Error(), 1e-5);
    }
  }
  std::sort(answers.begin(), answers.end());
  EXPECT_EQ(answers, (std::vector<std::pair<uint64_t, int32_t>>{
                         {0, grpc::StatusCode::INVALID_ARGUMENT},
                         {7, grpc::StatusCode::INVALID_ARGUMENT},
                         {8, grpc::StatusCode::INVALID_ARGUMENT},
                         {9, grpc::StatusCode::OK}}));
  const grpc::Status status = raw.Close();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(MatmulStreamTest, ABatchIsAnsweredRequestByRequestAndCountedSo) {
  ServerConfig config = TestConfig();
  config.metrics_port = 0;
  Start(config);
  RawStream raw(channel_);
  ASSERT_TRUE(raw.started);
  // One message: three good requests, one with no call, one that nests a batch.
  std::vector<std::unique_ptr<Fp32Call>> good;
  std::vector<wire::EncodedMessage> elements;
  for (uint64_t id : {21, 22, 23}) {
    good.push_back(std::make_unique<Fp32Call>(3, 5, 4, id));
    elements.push_back(wire::EncodeStreamRequest(id, wire::StreamCall::kMatmul, 0,
                                                 EncodeMatmulArgs(good.back()->args)));
  }
  gemm::v1::StreamRequest no_call;
  no_call.set_id(24);
  elements.emplace_back();
  elements.back().AddOwned(no_call.SerializeAsString());
  gemm::v1::StreamRequest nested;
  nested.add_batch()->set_id(99);
  elements.emplace_back();
  elements.back().AddOwned(nested.SerializeAsString());
  ASSERT_TRUE(raw.Write(wire::EncodeStreamBatch(elements).Flatten()));
  std::vector<std::string> read;
  ASSERT_TRUE(raw.ReadAnswers(5, &read));
  std::vector<std::pair<uint64_t, int32_t>> answers;
  for (const std::string& bytes : read) {
    wire::StreamResponseWire answer;
    ASSERT_TRUE(wire::ParseStreamResponse(wire::ByteRuns(bytes), &answer).ok());
    answers.emplace_back(answer.id, answer.code);
    if (answer.id == 0) EXPECT_TRUE(absl::StrContains(answer.message, "do not nest")) << answer.message;
    if (answer.id >= 21 && answer.id <= 23) {
      Fp32Call& call = *good[answer.id - 21];
      ASSERT_TRUE(ReadMatmulResponse(answer.result, {}, false, &call.result).ok());
      EXPECT_LT(call.Error(), 1e-5);
    }
  }
  std::sort(answers.begin(), answers.end());
  EXPECT_EQ(answers, (std::vector<std::pair<uint64_t, int32_t>>{
                         {0, grpc::StatusCode::INVALID_ARGUMENT},
                         {21, grpc::StatusCode::OK},
                         {22, grpc::StatusCode::OK},
                         {23, grpc::StatusCode::OK},
                         {24, grpc::StatusCode::INVALID_ARGUMENT}}));
  const grpc::Status status = raw.Close();
  EXPECT_TRUE(status.ok()) << status.error_message();
  // Each request of the batch counted on its own.
  EXPECT_TRUE(Eventually([&] {
    return Scraped(*server_, "gemm_stream_requests_total{code=\"OK\"}") == 3 &&
           Scraped(*server_, "gemm_stream_requests_total{code=\"INVALID_ARGUMENT\"}") == 2;
  }));
}

// A client that writes requests and never reads an answer: the server reads no more than
// --stream_max_outstanding of them, holds no more memory than they need, and gives it
// all back when the client cancels.
TEST_F(MatmulStreamTest, AStreamThatNeverReadsIsHeldAtItsCapAndCancelledClean) {
  ServerConfig config = TestConfig();
  config.stream_max_outstanding = 4;
  config.metrics_port = 0;
  FakeDevice* fake = StartGated(config);
  RawStream raw(channel_);
  ASSERT_TRUE(raw.started);
  // 256 KiB requests: the server's reads stop long before the client's writes do.
  Fp32Call big(256, 1, 256, 1);
  const std::string request_bytes =
      wire::EncodeStreamRequest(1, wire::StreamCall::kMatmul, 0, EncodeMatmulArgs(big.args))
          .Flatten();
  std::atomic<int> written{0};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load() && written.load() < 64 && raw.Write(request_bytes)) written.fetch_add(1);
  });
  fake->AwaitStarted(1);
  ASSERT_TRUE(Eventually([&] { return server_->metrics().inflight() == 4; }));
  absl::SleepFor(absl::Milliseconds(500));  // the client keeps writing; the server reads none
  EXPECT_EQ(server_->metrics().inflight(), 4);
  EXPECT_LE(server_->memory().reserved_bytes(), 4 * (static_cast<int64_t>(request_bytes.size()) + 1024));

  stop.store(true);
  raw.context.TryCancel();
  writer.join();
  // The cancellation reaches the server asynchronously (RST_STREAM): once it has, the
  // queued jobs (all but those in the launch held at the gate) are known cancelled.
  const size_t held = fake->ran_m().size();
  ASSERT_TRUE(Eventually(
      [&] { return server_->executor().CancelledJobsWaiting() == 4 - held; }));
  fake->Open();  // the one held at the device finishes; the queued ones are dropped
  ASSERT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(10)));
  ASSERT_TRUE(Eventually([&] { return server_->metrics().inflight() == 0; }));
  // A dropped job's memory goes with the job, a moment after its answer was settled.
  EXPECT_TRUE(Eventually([&] { return server_->memory().reserved_bytes() == 0; }))
      << server_->memory().reserved_bytes() << " bytes still reserved";
  EXPECT_EQ(Scraped(*server_, "gemm_open_streams"), 0);
  EXPECT_EQ(fake->ran_m().size(), held);  // nothing launched after the cancel
  EXPECT_EQ(Scraped(*server_, "gemm_stream_requests_total{code=\"CANCELLED\"}"), 4);
}

TEST_F(MatmulStreamTest, ADrainAnswersWhatWasReadAndEndsTheStream) {
  FakeDevice* fake = StartGated();
  MatmulStream stream(channel_);
  Fp32Call first(3, 2, 2, 1), second(4, 2, 2, 3), unread(5, 2, 2, 5);
  std::future<absl::Status> f1 = stream.Submit(first.args, {}, &first.result);
  std::future<absl::Status> f2 = stream.Submit(second.args, {}, &second.result);
  fake->AwaitStarted(1);  // one of them; the other queued
  ASSERT_TRUE(Eventually([&] { return server_->metrics().inflight() == 2; }));
  std::thread shutdown([&] { server_->Shutdown(); });
  ASSERT_TRUE(Eventually([&] {  // the drain has begun once new calls are refused
    grpc::ClientContext context;
    gemm::v1::ServerInfo info;
    return stub_->GetServerInfo(&context, gemm::v1::GetServerInfoRequest(), &info).error_code() ==
           grpc::StatusCode::UNAVAILABLE;
  }));
  // Sent after the drain began: answered UNAVAILABLE when the read already waiting takes
  // it, or never read and failed so by the client once the stream ends.
  std::future<absl::Status> f3 = stream.Submit(unread.args, {}, &unread.result);
  fake->Open();
  EXPECT_TRUE(f1.get().ok());
  EXPECT_TRUE(f2.get().ok());
  const absl::Status s3 = f3.get();
  EXPECT_EQ(s3.code(), absl::StatusCode::kUnavailable) << s3;
  EXPECT_TRUE(absl::StrContains(s3.message(), "send it again") ||
              s3.message() == "server is shutting down")
      << s3;
  EXPECT_TRUE(stream.Close().ok());  // the server ended it OK
  shutdown.join();
  // Requests of one stream are prepared side by side: they reach the queue in any order.
  std::vector<int64_t> ran = fake->ran_m();
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, (std::vector<int64_t>{3, 4}));

  MatmulStream late(channel_);
  const absl::Status refused = late.Submit(first.args, {}, &first.result).get();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_EQ(late.Close().code(), absl::StatusCode::kUnavailable);
}

TEST_F(MatmulStreamTest, SubmitsAfterCloseFailAndCloseIsIdempotent) {
  Start();
  MatmulStream stream(channel_);
  Fp32Call call(2, 2, 2, 1);
  EXPECT_TRUE(stream.Submit(call.args, {}, &call.result).get().ok());
  EXPECT_TRUE(stream.Close().ok());
  EXPECT_TRUE(stream.Close().ok());
  const absl::Status late = stream.Submit(call.args, {}, &call.result).get();
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
}

// The server's caps count a stream's requests as they count unary calls: past the queue
// or the memory cap a request is answered RESOURCE_EXHAUSTED, and the stream goes on.
TEST_F(MatmulStreamTest, ARequestPastTheServersCapsIsRefusedAloneLikeAUnaryCall) {
  ServerConfig config = TestConfig();
  config.max_queue_size = 2;
  config.max_inflight_bytes = 1 << 20;
  FakeDevice* fake = StartGated(config);
  MatmulStream stream(channel_);
  std::vector<std::unique_ptr<Fp32Call>> calls;
  for (int i = 0; i < 3; ++i) calls.push_back(std::make_unique<Fp32Call>(3 + i, 2, 2, 2 * i));
  std::vector<std::future<absl::Status>> answers;
  answers.push_back(stream.Submit(calls[0]->args, {}, &calls[0]->result));
  fake->AwaitStarted(1);  // held at the device; two more fill the queue
  answers.push_back(stream.Submit(calls[1]->args, {}, &calls[1]->result));
  answers.push_back(stream.Submit(calls[2]->args, {}, &calls[2]->result));
  ASSERT_TRUE(Eventually([&] { return server_->metrics().inflight() == 3; }));
  Fp32Call past_queue(6, 2, 2, 9);
  const absl::Status refused = stream.Submit(past_queue.args, {}, &past_queue.result).get();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "--max_queue_size=2")) << refused;
  // 2 MiB of operands against a 1 MiB memory cap.
  Fp32Call too_big(512, 1, 512, 11);
  const absl::Status big = stream.Submit(too_big.args, {}, &too_big.result).get();
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big;
  EXPECT_TRUE(absl::StrContains(big.message(), "--max_inflight_bytes")) << big;
  fake->Open();
  for (auto& answer : answers) EXPECT_TRUE(answer.get().ok());
  EXPECT_TRUE(stream.Close().ok());
  ASSERT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(10)));
  // A result's memory goes when gRPC lets go of the slices it sent, a moment after the
  // client has the answer.
  EXPECT_TRUE(Eventually([&] { return server_->memory().reserved_bytes() == 0; }))
      << server_->memory().reserved_bytes() << " bytes still reserved";
}

}  // namespace
}  // namespace gemmd::testing
