// Striped calls (client/striped_call.h) against a whole server in-process (CPU backend):
// a call over several connections answers the same C, byte for byte, as the same call
// over one (dense FP32 and FP16 with transposes, batched, beta != 0, INT8 and NVFP4
// weight-only), blocking and callback; it leaves no tensor on the server whether it
// succeeds or fails (a kernel the server refuses, a store too small for its operands);
// GetTensor row ranges read back exactly those rows (and OUT_OF_RANGE outside them);
// the automatic choice stripes big calls only; a pool whose connections reach two server
// processes is found out, and the call is made again on one connection.
#include "client/striped_call.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/connection_pool.h"
#include "client/tensor_store_client.h"
#include "kernels/quant_formats.h"
#include "server/store/tensor_store.h"
#include "tests/client_calls.h"
#include "tests/server_fixture.h"

namespace gemmd::testing {
namespace {

// A C = A[m,k] * B[k,n] FP32 call of N(0,1) operands it owns (seeds `seed`, `seed` + 1).
struct DenseCall {
  std::string a, b;
  MatmulArgs args;
};
std::unique_ptr<DenseCall> Fp32Call(int64_t m, int64_t k, int64_t n, uint64_t seed) {
  auto call = std::make_unique<DenseCall>();
  call->a = Random(DataType::kFloat32, m * k, seed);
  call->b = Random(DataType::kFloat32, k * n, seed + 1);
  call->args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT32, call->a};
  call->args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, call->b};
  return call;
}

class StripedCallTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    ServerConfig config = TestConfig();
    config.tensor_store_bytes = int64_t{512} << 20;
    Start(config);
  }

  // A client whose striped calls go over connections of their own, as to a remote server.
  std::unique_ptr<GemmClient> Client() {
    const std::string target = absl::StrCat("127.0.0.1:", server_->port());
    pool_ = std::make_shared<ConnectionPool>(Endpoint(target));  // connections 1..
    return std::make_unique<GemmClient>(channel_, pool_);
  }

  // The tensors on the server (every tenant's: the server authenticates nobody), once a
  // call's last streams have let go of theirs: a part upload's server side may end just
  // after its client heard the answer.
  int64_t StoredTensors() {
    Eventually([this] { return CountTensors() == 0; });
    return CountTensors();
  }
  int64_t CountTensors() {
    TensorStoreClient store(channel_);
    absl::StatusOr<gemm::v1::ListTensorsResponse> list = store.ListTensors();
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? list->store_tensors() : -1;
  }

  // C of `args` over one connection and over `stripes`: equal byte for byte, nothing left.
  // `chunk_bytes`: CallOptions::stripe_chunk_bytes (0 = the default); `row_blocks`:
  // CallOptions::row_blocks, and `blocks` the row blocks the call must have gone in.
  void ExpectSameC(const MatmulArgs& args, int stripes, int64_t chunk_bytes = 0, int row_blocks = 0,
                   int blocks = 1) {
    std::unique_ptr<GemmClient> client = Client();
    CallOptions one;
    one.stripes = 1;
    MatmulResult single;
    ASSERT_TRUE(client->Matmul(args, one, &single).ok());
    CallOptions many;
    many.stripes = stripes;
    many.stripe_chunk_bytes = chunk_bytes;
    many.row_blocks = row_blocks;
    ASSERT_EQ(client->StripesFor(args, many), stripes);
    MatmulResult striped;
    const absl::Status s = client->Matmul(args, many, &striped);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(striped.c().size(), single.c().size());
    EXPECT_EQ(std::memcmp(striped.c().data(), single.c().data(), single.c().size()), 0);
    EXPECT_EQ(striped.info().c().shape_size(), single.info().c().shape_size());
    EXPECT_EQ(striped.info().c().dtype(), single.info().c().dtype());
    EXPECT_TRUE(striped.info().c_ref().handle().empty());
    EXPECT_EQ(striped.info().kernel(), single.info().kernel());
    // The striped call's steps (the one-connection call has none); C came back striped.
    EXPECT_FALSE(single.striped_steps().has_value());
    ASSERT_TRUE(striped.striped_steps().has_value());
    EXPECT_GT(striped.striped_steps()->put, absl::ZeroDuration());
    EXPECT_GT(striped.striped_steps()->call, absl::ZeroDuration());
    EXPECT_GT(striped.striped_steps()->get, absl::ZeroDuration());
    EXPECT_EQ(striped.striped_steps()->row_blocks, blocks);
    EXPECT_EQ(StoredTensors(), 0);
  }

  std::shared_ptr<ConnectionPool> pool_;
};

TEST_F(StripedCallTest, DenseFp32MatchesOneConnection) {
  // 2 MiB operands and C: two parts each (a part is at least 1 MiB).
  const int64_t m = 1024, k = 512, n = 640;
  const std::unique_ptr<DenseCall> call = Fp32Call(m, k, n, 1);
  MatmulArgs args = call->args;
  ExpectSameC(args, 4, 0, /*row_blocks=*/1, /*blocks=*/1);
  ExpectSameC(args, 4);  // the client's choice: whole (kDefaultRowBlocks)
}

// In row blocks (MatmulRequest.row_plan): each block is computed as the whole product's
// rows, so C is the one-connection call's to the bit, a short last block included; the
// blocks' temporaries (A's blocks, their Cs) are all gone afterwards.
TEST_F(StripedCallTest, RowBlocksMatchOneConnection) {
  {
    const std::unique_ptr<DenseCall> call = Fp32Call(1024, 512, 640, 2);
    ExpectSameC(call->args, 4, 0, /*row_blocks=*/2, /*blocks=*/2);
  }
  {
    // 1300 rows: blocks of 512, 512 and 276; asking for more blocks than 512-row panels
    // gets one per panel.
    const std::unique_ptr<DenseCall> call = Fp32Call(1300, 384, 520, 3);
    ExpectSameC(call->args, 3, 0, /*row_blocks=*/16, /*blocks=*/3);
  }
  {
    // FP16 on the tensor path, B stored [N,K], FP16 C, alpha: one product, three blocks.
    const int64_t m = 1536, k = 320, n = 264;
    const std::string a = Random(DataType::kFloat16, m * k, 5);
    const std::string b = Random(DataType::kFloat16, n * k, 6);
    MatmulArgs args;
    args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT16, a};
    args.b = {{n, k}, gemm::v1::DATA_TYPE_FLOAT16, b};
    args.transpose_b = true;
    args.alpha = 0.75f;
    args.output_dtype = gemm::v1::DATA_TYPE_FLOAT16;
    ExpectSameC(args, 2, 0, /*row_blocks=*/3, /*blocks=*/3);
  }
}

// Fewer than two 512-row panels, or a C input: whole, as before.
TEST_F(StripedCallTest, CallsThatCannotGoInBlocksGoWhole) {
  const std::unique_ptr<DenseCall> small = Fp32Call(512, 512, 640, 7);
  ExpectSameC(small->args, 2, 0, /*row_blocks=*/4, /*blocks=*/1);
  const std::unique_ptr<DenseCall> call = Fp32Call(1024, 256, 512, 8);
  const std::string c = Random(DataType::kFloat32, 1024 * 512, 9);
  MatmulArgs args = call->args;
  args.c = TensorRef{{1024, 512}, gemm::v1::DATA_TYPE_FLOAT32, c};
  args.beta = 0.5f;
  ExpectSameC(args, 2, 0, /*row_blocks=*/4, /*blocks=*/1);
}

TEST_F(StripedCallTest, Fp16TransposedWithBetaMatchesOneConnection) {
  const int64_t m = 1536, k = 1024, n = 768;
  const std::string a = Random(DataType::kFloat16, k * m, 3);  // stored [K, M]
  const std::string b = Random(DataType::kFloat16, n * k, 4);  // stored [N, K]
  const std::string c = Random(DataType::kFloat16, m * n, 5);
  MatmulArgs args;
  args.a = {{k, m}, gemm::v1::DATA_TYPE_FLOAT16, a};
  args.b = {{n, k}, gemm::v1::DATA_TYPE_FLOAT16, b};
  args.c = TensorRef{{m, n}, gemm::v1::DATA_TYPE_FLOAT16, c};
  args.transpose_a = true;
  args.transpose_b = true;
  args.alpha = 0.5f;
  args.beta = -1.25f;
  args.output_dtype = gemm::v1::DATA_TYPE_FLOAT16;
  ExpectSameC(args, 3);
  // The parts in 64 KiB messages (the default is 4 MiB: one message a part here).
  ExpectSameC(args, 3, 64 << 10);
}

TEST_F(StripedCallTest, BatchedWithSharedBMatchesOneConnection) {
  // A [3, 512, 384] against a shared B [384, 700]: C [3, 512, 700], rows split over items.
  const int64_t batch = 3, m = 512, k = 384, n = 700;
  const std::string a = Random(DataType::kFloat32, batch * m * k, 6);
  const std::string b = Random(DataType::kFloat32, k * n, 7);
  MatmulArgs args;
  args.a = {{batch, m, k}, gemm::v1::DATA_TYPE_FLOAT32, a};
  args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, b};
  ExpectSameC(args, 5);
}

TEST_F(StripedCallTest, QuantizedMatchesOneConnection) {
  const int64_t m = 512, n = 1024, k = 1024;
  const std::unique_ptr<QuantizedCalls> calls = MakeQuantizedCalls(m, n, k);
  std::unique_ptr<GemmClient> client = Client();
  for (const QuantizedMatmulArgs* args : {&calls->int8, &calls->nvfp4}) {
    CallOptions one;
    one.stripes = 1;
    MatmulResult single;
    ASSERT_TRUE(client->QuantizedMatmul(*args, one, &single).ok());
    CallOptions many;
    many.stripes = 4;
    MatmulResult striped;
    const absl::Status s = client->QuantizedMatmul(*args, many, &striped);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(striped.c().size(), static_cast<size_t>(m * n * 4));
    EXPECT_EQ(std::memcmp(striped.c().data(), single.c().data(), single.c().size()), 0);
    EXPECT_EQ(StoredTensors(), 0);
  }
}

TEST_F(StripedCallTest, CallbackCallIntoTheCallersBuffer) {
  const int64_t m = 1024, k = 512, n = 512;
  const std::unique_ptr<DenseCall> call = Fp32Call(m, k, n, 10);
  MatmulArgs args = call->args;
  std::unique_ptr<GemmClient> client = Client();
  CallOptions one;
  one.stripes = 1;
  MatmulResult single;
  ASSERT_TRUE(client->Matmul(args, one, &single).ok());

  std::vector<char> out(static_cast<size_t>(m * n * 4), 0);
  CallOptions many;
  many.stripes = 2;
  many.c_out = absl::MakeSpan(out);
  MatmulResult striped;
  absl::Notification done;
  absl::Status status;
  client->MatmulAsync(args, many, &striped, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(striped.c().data(), out.data());
  EXPECT_EQ(std::memcmp(out.data(), single.c().data(), out.size()), 0);
  EXPECT_EQ(StoredTensors(), 0);
}

TEST_F(StripedCallTest, AFailedCallLeavesNothingAndSaysWhy) {
  const int64_t m = 1024, k = 512, n = 512;
  const std::unique_ptr<DenseCall> call = Fp32Call(m, k, n, 12);
  MatmulArgs args = call->args;
  args.kernel = "no_such_kernel";  // refused by the Matmul, after both uploads
  std::unique_ptr<GemmClient> client = Client();
  for (const int row_blocks : {1, 2}) {  // whole, and in blocks (the first block's fails)
    SCOPED_TRACE(absl::StrCat("row_blocks=", row_blocks));
    CallOptions many;
    many.stripes = 4;
    many.row_blocks = row_blocks;
    MatmulResult result;
    const absl::Status s = client->Matmul(args, many, &result);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "no kernel named 'no_such_kernel'")) << s;
    EXPECT_EQ(StoredTensors(), 0);
  }
}

TEST_F(StripedCallTest, AStoreTooSmallForTheOperandsFailsWithTheServersStatus) {
  ServerConfig config = TestConfig();
  config.tensor_store_bytes = int64_t{3} << 20;  // A fits, B does not
  server_.reset();
  Start(config);
  const int64_t m = 1024, k = 512, n = 1024;
  const std::unique_ptr<DenseCall> call = Fp32Call(m, k, n, 14);
  MatmulArgs args = call->args;
  std::unique_ptr<GemmClient> client = Client();
  CallOptions many;
  many.stripes = 2;
  MatmulResult result;
  const absl::Status s = client->Matmul(args, many, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(StoredTensors(), 0);
  // The same call on one connection is the server's to refuse or serve: it is not
  // limited by the store.
  CallOptions one;
  one.stripes = 1;
  EXPECT_TRUE(client->Matmul(args, one, &result).ok());
}

TEST_F(StripedCallTest, TheClientsChoiceGivesWayToAServerWithoutAStore) {
  ServerConfig config = TestConfig();
  config.tensor_store_bytes = 0;
  server_.reset();
  Start(config);
  // 36 MiB with C: striped by the client's own choice.
  const int64_t m = 4096, k = 1024, n = 1024;
  const std::unique_ptr<DenseCall> call = Fp32Call(m, k, n, 19);
  MatmulArgs args = call->args;
  std::unique_ptr<GemmClient> client = Client();
  CallOptions options;
  options.stripes = 1;
  EXPECT_EQ(client->StripesFor(args, options), 1);
  options.stripes = 0;  // the client's choice, the default
  ASSERT_EQ(client->StripesFor(args, options), kDefaultStripes);
  EXPECT_EQ(client->StripesFor(args, CallOptions()), kDefaultStripes);
  MatmulResult result;
  const absl::Status s = client->Matmul(args, options, &result);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(result.c().size(), static_cast<size_t>(m * n * 4));
  EXPECT_EQ(client->StripesFor(args, options), 1);  // not tried again
  // Asked for, stripes are not a choice to give up: the server's answer.
  options.stripes = 2;
  EXPECT_EQ(client->Matmul(args, options, &result).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StripedCallTest, TheClientStripesBigCallsOnly) {
  std::unique_ptr<GemmClient> client = Client();
  const std::string small(size_t{1} << 20, '\0');
  const std::string big(size_t{16} << 20, '\0');
  MatmulArgs args;
  args.a = {{512, 512}, gemm::v1::DATA_TYPE_FLOAT32, small};
  args.b = {{512, 512}, gemm::v1::DATA_TYPE_FLOAT32, small};
  CallOptions options;
  options.stripes = 0;  // the client's choice
  EXPECT_EQ(client->StripesFor(args, options), 1);  // 3 MiB with C
  args.a = {{2048, 2048}, gemm::v1::DATA_TYPE_FLOAT32, big};
  args.b = {{2048, 2048}, gemm::v1::DATA_TYPE_FLOAT32, big};
  EXPECT_EQ(client->StripesFor(args, options), kDefaultStripes);  // 48 MiB with C
  options.stripes = 1;
  EXPECT_EQ(client->StripesFor(args, options), 1);
  options.stripes = 3;
  EXPECT_EQ(client->StripesFor(args, options), 3);
  // Without a pool, one connection whatever was asked.
  GemmClient plain(channel_);
  EXPECT_EQ(plain.StripesFor(args, options), 1);
  // A target that balances over several servers is not striped unless asked.
  EXPECT_TRUE(SingleAddressTarget("127.0.0.1:50051"));
  EXPECT_TRUE(SingleAddressTarget("unix:/run/gemmd.sock"));
  EXPECT_TRUE(SingleAddressTarget("ipv4:10.0.0.1:50051"));
  EXPECT_FALSE(SingleAddressTarget("ipv4:10.0.0.1:50051,10.0.0.2:50051"));
  EXPECT_FALSE(SingleAddressTarget("dns:///gemmd-headless:50051"));
  ConnectionPool spread(Endpoint("dns:///gemmd:50051"));
  EXPECT_FALSE(spread.single_address());
}

TEST_F(StripedCallTest, RowRangesReadBackExactlyThoseRows) {
  TensorStoreClient store(channel_, std::make_shared<ConnectionPool>([this](int index) {
                            return ConnectChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                                  1 + index);
                          }));
  const int64_t rows = 1000, cols = 700;
  const std::string data = Random(DataType::kFloat32, rows * cols, 16);
  absl::StatusOr<std::string> handle =
      store.PutTensor(TensorRef{{rows, cols}, gemm::v1::DATA_TYPE_FLOAT32, data});
  ASSERT_TRUE(handle.ok()) << handle.status();
  for (int connections : {1, 2, 3, 7}) {
    std::string out(data.size(), '\0');
    absl::StatusOr<gemm::v1::TensorHeader> header =
        store.ReadInto(*handle, TensorRows{rows, cols * 4, 0}, absl::MakeSpan(out), {},
                       connections);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->shape(0), rows);
    EXPECT_EQ(out, data) << connections;
    absl::StatusOr<DownloadedTensor> got = store.GetTensor(*handle, absl::Seconds(60),
                                                           connections);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->data, data) << connections;
  }
  // A layout that is not the tensor's (rows twice as wide): refused at the header, before
  // anything is written.
  std::string out(data.size() * 2, '\0');
  const absl::Status wrong =
      store.ReadInto(*handle, TensorRows{rows, cols * 8, 0}, absl::MakeSpan(out), {}, 2).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInternal) << wrong;
  EXPECT_EQ(out, std::string(out.size(), '\0'));

  // Rows outside the tensor: OUT_OF_RANGE, saying which.
  auto stub = gemm::v1::GemmService::NewStub(channel_);
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
           {0, rows + 1}, {-1, 5}, {5, 5}, {7, 3}, {rows, rows + 1}}) {
    grpc::ClientContext context;
    gemm::v1::GetTensorRequest request;
    request.set_handle(*handle);
    request.set_row_begin(begin);
    request.set_row_end(end);
    auto reader = stub->GetTensor(&context, request);
    gemm::v1::TensorChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << begin << ".." << end;
    EXPECT_TRUE(absl::StrContains(s.error_message(), absl::StrCat(rows, " rows")))
        << s.error_message();
  }
  EXPECT_TRUE(store.DeleteTensors({*handle}).ok());
  EXPECT_EQ(store.DeleteTensors({*handle}).code(), absl::StatusCode::kNotFound);
}

TEST_F(StripedCallTest, APoolThatReachesTwoServersFallsBackToOneConnection) {
  // A second server process stands in for a second replica behind one name: the pool's
  // odd connections reach it.
  absl::StatusOr<std::unique_ptr<GemmServer>> other = GemmServer::CreateWithBackend(
      [] {
        ServerConfig config = TestConfig();
        config.tensor_store_bytes = int64_t{512} << 20;
        return config;
      }(),
      OpenCpuBackend());
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string here = absl::StrCat("127.0.0.1:", server_->port());
  const std::string there = absl::StrCat("127.0.0.1:", (*other)->port());
  // Whole, and in row blocks (A's 2 MiB blocks go in two parts).
  const int64_t m = 1024, k = 1024, n = 256;
  const std::unique_ptr<DenseCall> call = Fp32Call(m, k, n, 17);
  MatmulArgs args = call->args;
  for (const int row_blocks : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("row_blocks=", row_blocks));
    auto pool = std::make_shared<ConnectionPool>([here, there](int index) {
      return ConnectChannel(index % 2 == 0 ? here : there, 1 + index);
    });
    GemmClient client(channel_, pool);
    CallOptions one;
    one.stripes = 1;
    MatmulResult single;
    ASSERT_TRUE(client.Matmul(args, one, &single).ok());
    CallOptions many;
    many.stripes = 2;
    many.row_blocks = row_blocks;
    MatmulResult result;
    const absl::Status s = client.Matmul(args, many, &result);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(std::memcmp(result.c().data(), single.c().data(), single.c().size()), 0);
    EXPECT_FALSE(result.striped_steps().has_value());  // made again on one connection
    EXPECT_FALSE(pool->single_address());
    EXPECT_EQ(StoredTensors(), 0);
  }
}

// A server that starts draining while a striped call is midway (its operands put, its
// GEMM held by a gated device) serves the call to its end: the GEMM, the reads of C and
// the deletes all carry gemmd-continues naming a temporary; a new call, or one naming a
// tensor that is no temporary, is refused; the drain waits until the temporaries are gone.
class StripedDrainTest : public StripedCallTest {
 protected:
  void SetUp() override {
    auto device = std::make_unique<FakeDevice>(/*gated=*/true);
    device_ = device.get();
    ServerConfig config = TestConfig();
    config.tensor_store_bytes = int64_t{64} << 20;
    Start(config, std::move(device));
  }
  FakeDevice* device_ = nullptr;
};

TEST_F(StripedDrainTest, AStripedCallInFlightAtADrainIsServedToItsEnd) {
  std::unique_ptr<GemmClient> client = Client();
  const std::unique_ptr<DenseCall> call = Fp32Call(96, 64, 80, 21);
  CallOptions options;
  options.stripes = 4;  // every operand and C striped
  MatmulResult result;
  absl::Status status;
  absl::Notification done;
  client->MatmulAsync(call->args, options, &result, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  device_->AwaitStarted(1);  // A and B are temporaries now; the GEMM waits at the gate
  absl::Notification shut_down;
  std::thread drain([&] {
    server_->Shutdown();
    shut_down.Notify();
  });
  // Draining: a new call is refused... (A probe that comes before the drain starts is
  // queued behind the gate: a short deadline lets the loop go on; the drain waits for it.)
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(Eventually([&] {
    return Call(RandomRequest(4, 4, 4, 1), &response, absl::Milliseconds(300)).error_code() ==
           grpc::StatusCode::UNAVAILABLE;
  }));
  // ...and so is one that names something other than a live temporary.
  TensorStoreClient store(channel_);
  const absl::Status bogus = store.DeleteTensor("t1-nobody", absl::Seconds(5));
  EXPECT_EQ(bogus.code(), absl::StatusCode::kUnavailable) << bogus;
  EXPECT_FALSE(shut_down.HasBeenNotified());  // the call's temporaries hold the drain
  device_->Open();
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(result.c().size(), size_t{96 * 80 * 4});
  float c0 = 0;
  std::memcpy(&c0, result.c().data(), sizeof(c0));
  EXPECT_EQ(c0, 96.0f);  // the fake device's answer: m everywhere
  shut_down.WaitForNotification();
  drain.join();
  EXPECT_EQ(server_->store()->TemporaryCount(), 0);
}

}  // namespace
}  // namespace gemmd::testing
