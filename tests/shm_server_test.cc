// Shared-memory regions against a whole server in-process: Matmul and QuantizedMatmul
// with operands and C in a region answer the same C, byte for byte, as inline calls
// (batched, broadcast, beta != 0 with C updated in place, FP16 out, INT8 and NVFP4
// weight-only); every refusal has its code (a region not registered, another tenant's,
// a key outside the prefix, a slice beyond the region, a C slice of the wrong size or
// overlapping an operand, bytes sent both ways, --shm=off); and a region truncated,
// unregistered or unlinked while a call uses it: the server keeps serving and the call
// fails (truncated, unregistered) or is answered right (unlinked: the mapping keeps the
// object's bytes).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "client/shared_memory.h"
#include "client/tensor_store_client.h"
#include "kernels/quant_formats.h"
#include "server/store/tensor_store.h"
#include "tests/metrics_util.h"
#include "tests/client_calls.h"
#include "tests/server_fixture.h"

namespace gemmd::testing {
namespace {

std::string Key(const std::string& what) { return absl::StrCat("/gemmd-test", getpid(), what); }

// Copies `bytes` into `region` at `*at` (rounded up to 64) and returns their slice.
RegionSliceRef Put(SharedMemoryRegion* region, const std::string& name, int64_t* at,
                   absl::string_view bytes) {
  *at = (*at + 63) / 64 * 64;
  std::memcpy(region->data() + *at, bytes.data(), bytes.size());
  RegionSliceRef slice{name, *at, static_cast<int64_t>(bytes.size())};
  *at += static_cast<int64_t>(bytes.size());
  return slice;
}

class ShmServerTest : public InProcessServerTest {
 protected:
  void SetUp() override { Start(); }

  std::unique_ptr<SharedMemoryRegion> Region(const std::string& what, int64_t bytes) {
    absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
        SharedMemoryRegion::Create(Key(what), bytes, /*replace=*/true);
    EXPECT_TRUE(region.ok()) << region.status();
    return region.ok() ? *std::move(region) : nullptr;
  }

  absl::Status Register(const std::string& name, const SharedMemoryRegion& region) {
    return RegionClient(channel_).Register(name, region.key()).status();
  }
};

TEST_F(ShmServerTest, DenseCallsThroughARegionMatchInlineCalls) {
  GemmClient client(channel_);
  std::unique_ptr<SharedMemoryRegion> region = Region("dense", 8 << 20);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("dense", *region).ok());

  struct Case {
    const char* what;
    MatmulArgs args;
    int64_t c_bytes;
  };
  // Batched A [3,64,40] times a broadcast B [40,24]; C_in given, beta != 0.
  const std::string a = Random(DataType::kFloat32, 3 * 64 * 40, 1);
  const std::string b = Random(DataType::kFloat32, 40 * 24, 2);
  const std::string c = Random(DataType::kFloat32, 3 * 64 * 24, 3);
  MatmulArgs batched;
  batched.a = {{3, 64, 40}, gemm::v1::DATA_TYPE_FLOAT32, a};
  batched.b = {{40, 24}, gemm::v1::DATA_TYPE_FLOAT32, b};
  batched.c = TensorRef{{3, 64, 24}, gemm::v1::DATA_TYPE_FLOAT32, c};
  batched.alpha = 0.5f;
  batched.beta = -1.5f;
  // FP16 in and out, B transposed.
  const std::string a16 = Random(DataType::kFloat16, 96 * 64, 4);
  const std::string b16 = Random(DataType::kFloat16, 48 * 64, 5);
  MatmulArgs half;
  half.a = {{96, 64}, gemm::v1::DATA_TYPE_FLOAT16, a16};
  half.b = {{48, 64}, gemm::v1::DATA_TYPE_FLOAT16, b16};
  half.transpose_b = true;
  half.output_dtype = gemm::v1::DATA_TYPE_FLOAT16;
  for (const Case& c : {Case{"batched", batched, 3 * 64 * 24 * 4}, Case{"fp16", half, 96 * 48 * 2}}) {
    MatmulResult inline_result;
    ASSERT_TRUE(client.Matmul(c.args, {}, &inline_result).ok()) << c.what;
    // Operands in the region; C to its own slice.
    MatmulArgs shm = c.args;
    int64_t at = 0;
    shm.a.shm = Put(region.get(), "dense", &at, c.args.a.data);
    shm.b.shm = Put(region.get(), "dense", &at, c.args.b.data);
    if (c.args.c) shm.c->shm = Put(region.get(), "dense", &at, c.args.c->data);
    at = (at + 63) / 64 * 64;
    shm.c_shm = {"dense", at, c.c_bytes};
    MatmulResult shm_result;
    const absl::Status s = client.Matmul(shm, {}, &shm_result);
    ASSERT_TRUE(s.ok()) << c.what << ": " << s;
    EXPECT_TRUE(shm_result.c().empty()) << c.what;  // C is in the region, not the response
    EXPECT_EQ(shm_result.info().c().DebugString(), inline_result.info().c().DebugString());
    ASSERT_EQ(static_cast<int64_t>(inline_result.c().size()), c.c_bytes);
    EXPECT_EQ(std::memcmp(region->data() + at, inline_result.c().data(), c.c_bytes), 0)
        << c.what;
    if (c.args.c) {
      // C = alpha*A*B + beta*C in place: C's slice is both C_in and c_shm.
      MatmulArgs in_place = shm;
      in_place.c_shm = shm.c->shm;
      ASSERT_TRUE(client.Matmul(in_place, {}, &shm_result).ok());
      EXPECT_EQ(std::memcmp(region->data() + shm.c->shm.offset, inline_result.c().data(),
                            c.c_bytes),
                0);
    }
  }
}

TEST_F(ShmServerTest, QuantizedCallsThroughARegionMatchInlineCalls) {
  GemmClient client(channel_);
  std::unique_ptr<SharedMemoryRegion> region = Region("quant", 8 << 20);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("quant", *region).ok());
  const int64_t m = 32, n = 64, k = 128;
  const std::unique_ptr<QuantizedCalls> calls = MakeQuantizedCalls(m, n, k);
  for (const QuantizedMatmulArgs* args : {&calls->int8, &calls->nvfp4}) {
    MatmulResult inline_result;
    ASSERT_TRUE(client.QuantizedMatmul(*args, {}, &inline_result).ok());
    QuantizedMatmulArgs shm = *args;
    int64_t at = 0;
    if (shm.a) {
      shm.a->data_shm = Put(region.get(), "quant", &at, args->a->data);
      shm.a->scales_shm = Put(region.get(), "quant", &at, args->a->scales);
    } else {
      shm.a_dense->shm = Put(region.get(), "quant", &at, args->a_dense->data);
    }
    shm.b.data_shm = Put(region.get(), "quant", &at, args->b.data);
    shm.b.scales_shm = Put(region.get(), "quant", &at, args->b.scales);
    at = (at + 63) / 64 * 64;
    shm.c_shm = {"quant", at, m * n * 4};
    MatmulResult shm_result;
    const absl::Status s = client.QuantizedMatmul(shm, {}, &shm_result);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(std::memcmp(region->data() + at, inline_result.c().data(), m * n * 4), 0);
  }
}

TEST_F(ShmServerTest, BadSlicesAreRefusedWithTheirCodes) {
  GemmClient client(channel_);
  std::unique_ptr<SharedMemoryRegion> region = Region("bad", 1 << 20);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("bad", *region).ok());
  const std::string a = Random(DataType::kFloat32, 16 * 8, 1);
  const std::string b = Random(DataType::kFloat32, 8 * 4, 2);
  MatmulArgs base;
  base.a = {{16, 8}, gemm::v1::DATA_TYPE_FLOAT32, a};
  base.b = {{8, 4}, gemm::v1::DATA_TYPE_FLOAT32, b};
  struct Case {
    const char* what;
    MatmulArgs args;
    absl::StatusCode code;
    const char* message;
  };
  std::vector<Case> cases;
  MatmulArgs args = base;
  args.a.shm = {"nobody", 0, 16 * 8 * 4};
  cases.push_back({"unregistered", args, absl::StatusCode::kNotFound, "no region named 'nobody'"});
  args = base;
  args.a.shm = {"bad", (1 << 20) - 100, 16 * 8 * 4};
  cases.push_back({"beyond", args, absl::StatusCode::kOutOfRange, "which has 1048576"});
  args = base;
  args.a.shm = {"bad", 0, 16 * 8 * 4 - 4};
  cases.push_back({"short", args, absl::StatusCode::kInvalidArgument, "a"});
  args = base;
  args.c_shm = {"bad", 4096, 16 * 4 * 4 + 4};
  cases.push_back({"c size", args, absl::StatusCode::kInvalidArgument, "c_shm holds 260 bytes; C is 256"});
  args = base;
  args.a.shm = {"bad", 0, 16 * 8 * 4};
  args.c_shm = {"bad", 256, 16 * 4 * 4};
  cases.push_back({"overlap", args, absl::StatusCode::kInvalidArgument, "c_shm overlaps a's slice"});
  args = base;
  args.c_shm = {"bad", 0, 16 * 4 * 4};
  args.keep_c = KeepResult{};
  cases.push_back({"keep_c", args, absl::StatusCode::kInvalidArgument, "keep_c and c_shm"});
  for (const Case& c : cases) {
    MatmulResult result;
    const absl::Status s = client.Matmul(c.args, {}, &result);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.message)) << c.what << ": " << s;
  }
  // Bytes both inline and in the region (the client library never sends both: by hand).
  gemm::v1::MatmulRequest request = RandomRequest(16, 4, 8, 3);
  request.mutable_a()->mutable_shm()->set_region("bad");
  request.mutable_a()->mutable_shm()->set_bytes(16 * 8 * 4);
  gemm::v1::MatmulResponse response;
  const grpc::Status both = Call(request, &response);
  EXPECT_EQ(both.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(both.error_message(), "a is sent inline and in a region"))
      << both.error_message();
  // Registration errors.
  RegionClient regions(channel_);
  EXPECT_EQ(regions.Register("bad", region->key()).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(regions.Register("x", "/elsewhere").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(regions.Register("x", Key("missing")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.Unregister("nobody").code(), absl::StatusCode::kNotFound);
  absl::StatusOr<gemm::v1::ListRegionsResponse> listed = regions.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->regions_size(), 1);
  EXPECT_EQ(listed->regions(0).name(), "bad");
  EXPECT_EQ(listed->regions(0).bytes(), 1 << 20);
  EXPECT_EQ(listed->region_bytes(), 1 << 20);
  EXPECT_EQ(MetricValue(server_->metrics(), "gemm_shm_region_bytes", {}), 1 << 20);
  EXPECT_EQ(MetricValue(server_->metrics(), "gemm_shm_regions", {}), 1);
  ASSERT_TRUE(regions.Unregister("bad").ok());
  listed = regions.List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  EXPECT_EQ(listed->region_bytes(), 0);
  EXPECT_EQ(MetricValue(server_->metrics(), "gemm_shm_region_bytes", {}), 0);
  EXPECT_EQ(MetricValue(server_->metrics(), "gemm_shm_regions", {}), 0);
}

class ShmPutTest : public ShmServerTest {
 protected:
  void SetUp() override {
    ServerConfig config = TestConfig();
    config.tensor_store_bytes = 64 << 20;
    Start(config);
  }
};

TEST_F(ShmPutTest, PutTensorFromARegionStoresTheSameBytes) {
  std::unique_ptr<SharedMemoryRegion> region = Region("put", 16 << 20);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Register("put", *region).ok());
  TensorStoreClient store(channel_);
  // 12 MiB, three times what one inline chunk may carry: one chunk from the region.
  const std::string b = Random(DataType::kFloat32, 1024 * 3072, 7);
  int64_t at = 0;
  TensorRef dense{{1024, 3072}, gemm::v1::DATA_TYPE_FLOAT32, {}, Put(region.get(), "put", &at, b)};
  absl::StatusOr<std::string> handle = store.PutTensor(dense);
  ASSERT_TRUE(handle.ok()) << handle.status();
  absl::StatusOr<DownloadedTensor> got = store.GetTensor(*handle, absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->data, b);
  // A quantized one, data and scales both there.
  std::vector<float> x(64 * 128, 0.25f);
  const Int8Matrix q = *QuantizeInt8(x.data(), 64, 128);
  QuantizedTensorRef quantized{{64, 128}, gemm::v1::QUANT_FORMAT_INT8, {}, {}, 0.0f};
  quantized.data_shm = Put(region.get(), "put", &at, Bytes(q.values));
  quantized.scales_shm = Put(region.get(), "put", &at, Bytes(q.scales));
  handle = store.PutTensor(quantized);
  ASSERT_TRUE(handle.ok()) << handle.status();
  got = store.GetTensor(*handle, absl::Seconds(30));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->data, std::string(Bytes(q.values)));
  EXPECT_EQ(got->scales, std::string(Bytes(q.scales)));
  // Refused: a slice beyond the region, a region not registered; nothing is stored.
  const int64_t before = server_->store()->tensor_count();
  dense.shm = {"put", (16 << 20) - 100, 1024 * 3072 * 4};
  EXPECT_EQ(store.PutTensor(dense).status().code(), absl::StatusCode::kOutOfRange);
  dense.shm = {"nobody", 0, 1024 * 3072 * 4};
  EXPECT_EQ(store.PutTensor(dense).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server_->store()->tensor_count(), before);
}

TEST(ShmOffTest, RegionsAreRefusedWithShmOff) {
  ServerConfig config = TestConfig();
  config.backend = "cpu";
  config.shm = false;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel = ChannelTo((*server)->port());
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::Create(Key("off"), 4096, true);
  ASSERT_TRUE(region.ok());
  const absl::Status s = RegionClient(channel).Register("r", (*region)->key()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--shm=off")) << s;
  GemmClient client(channel);
  const std::string a = Random(DataType::kFloat32, 4, 1);
  MatmulArgs args;
  args.a = {{2, 2}, gemm::v1::DATA_TYPE_FLOAT32, a};
  args.b = {{2, 2}, gemm::v1::DATA_TYPE_FLOAT32, a};
  args.c_shm = {"r", 0, 16};
  MatmulResult result;
  EXPECT_EQ(client.Matmul(args, {}, &result).code(), absl::StatusCode::kFailedPrecondition);
}

// A gated fake device holds the call while the test changes the region under it.
class ShmUnderACallTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    auto device = std::make_unique<FakeDevice>(/*gated=*/true);
    device->set_tag_from_a(true);
    device_ = device.get();
    Start(TestConfig(), std::move(device));
    region_ = *SharedMemoryRegion::Create(Key("under"), 2 * 4096, true);
    ASSERT_TRUE(RegionClient(channel_).Register("under", region_->key()).ok());
    const float tag = 42.0f;
    std::memcpy(region_->data(), &tag, sizeof(tag));
  }

  // A 4x4 FP32 call with A at 0 and C at 4096 (the second page), started.
  void StartCall() {
    args_.a = {{4, 4}, gemm::v1::DATA_TYPE_FLOAT32, {}, {"under", 0, 64}};
    args_.b = {{4, 4}, gemm::v1::DATA_TYPE_FLOAT32, {}, {"under", 64, 64}};
    args_.c_shm = {"under", 4096, 64};
    client_ = std::make_unique<GemmClient>(channel_);
    client_->MatmulAsync(args_, {}, &result_, [this](absl::Status s) {
      status_ = std::move(s);
      done_.Notify();
    });
    device_->AwaitStarted(1);
  }

  absl::Status Finish() {
    device_->Open();
    done_.WaitForNotification();
    return status_;
  }

  // The server still answers: an inline call.
  void ExpectServing() {
    gemm::v1::MatmulResponse response;
    EXPECT_TRUE(Call(RandomRequest(4, 4, 4, 9), &response).ok());
  }

  FakeDevice* device_ = nullptr;
  std::unique_ptr<SharedMemoryRegion> region_;
  std::unique_ptr<GemmClient> client_;
  MatmulArgs args_;
  MatmulResult result_;
  absl::Status status_;
  absl::Notification done_;
};

TEST_F(ShmUnderACallTest, TruncatedWhileUsedFailsTheCallAndTheServerServesOn) {
  StartCall();
  const int fd = shm_open(region_->key().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0), 0);  // C's page is gone: the device's write would be SIGBUS
  const absl::Status s = Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated")) << s;
  ASSERT_EQ(ftruncate(fd, 2 * 4096), 0);
  close(fd);
  ExpectServing();
  // The region stays refused until registered again.
  MatmulResult again;
  EXPECT_EQ(client_->Matmul(args_, {}, &again).code(), absl::StatusCode::kFailedPrecondition);
  RegionClient regions(channel_);
  ASSERT_TRUE(regions.Unregister("under").ok());
  ASSERT_TRUE(regions.Register("under", region_->key()).ok());
  const float tag = 7.0f;
  std::memcpy(region_->data(), &tag, sizeof(tag));
  EXPECT_TRUE(client_->Matmul(args_, {}, &again).ok());
  float c0 = 0;
  std::memcpy(&c0, region_->data() + 4096, sizeof(c0));
  EXPECT_EQ(c0, 7.0f);
}

TEST_F(ShmUnderACallTest, UnregisteredWhileUsedFailsTheCall) {
  StartCall();
  ASSERT_TRUE(RegionClient(channel_).Unregister("under").ok());
  const absl::Status s = Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "unregistered while the call used it")) << s;
  ExpectServing();
  MatmulResult again;
  EXPECT_EQ(client_->Matmul(args_, {}, &again).code(), absl::StatusCode::kNotFound);
}

TEST_F(ShmUnderACallTest, UnlinkedWhileUsedIsAnsweredFromTheMappedBytes) {
  StartCall();
  ASSERT_EQ(shm_unlink(region_->key().c_str()), 0);
  const absl::Status s = Finish();
  ASSERT_TRUE(s.ok()) << s;
  float c0 = 0;
  std::memcpy(&c0, region_->data() + 4096, sizeof(c0));
  EXPECT_EQ(c0, 42.0f);  // the device's tag from A, written where the caller reads it
  ExpectServing();
}

constexpr char kAliceToken[] = "alice-0123456789abcdef";
constexpr char kBobToken[] = "bob-fedcba9876543210";

TEST(ShmTenantsTest, ARegionBelongsToItsTenant) {
  const std::string tokens = absl::StrCat(::testing::TempDir(), "/shm_tokens_", getpid());
  std::ofstream(tokens) << "alice:" << kAliceToken << "\nbob:" << kBobToken << "\n";
  ServerConfig config = TestConfig();
  config.backend = "cpu";
  config.auth_tokens_file = tokens;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto as = [&](const char* token) {
    ChannelSecurity security;
    security.token = token;
    return ConnectChannel(Endpoint(absl::StrCat("127.0.0.1:", (*server)->port()), security));
  };
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region = SharedMemoryRegion::Create(
      absl::StrCat("/gemmd-alice@test", getpid()), 1 << 16, true);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_TRUE(RegionClient(as(kAliceToken)).Register("r", (*region)->key()).ok());
  // Bob may neither map alice's object nor use her region's name.
  EXPECT_EQ(RegionClient(as(kBobToken)).Register("r", (*region)->key()).status().code(),
            absl::StatusCode::kPermissionDenied);
  const std::string a = Random(DataType::kFloat32, 4, 1);
  std::memcpy((*region)->data(), a.data(), a.size());
  MatmulArgs args;
  args.a = {{2, 2}, gemm::v1::DATA_TYPE_FLOAT32, {}, {"r", 0, 16}};
  args.b = {{2, 2}, gemm::v1::DATA_TYPE_FLOAT32, a};
  MatmulResult result;
  const absl::Status bob = GemmClient(as(kBobToken)).Matmul(args, {}, &result);
  EXPECT_EQ(bob.code(), absl::StatusCode::kNotFound) << bob;
  EXPECT_TRUE(GemmClient(as(kAliceToken)).Matmul(args, {}, &result).ok());
  absl::StatusOr<gemm::v1::ListRegionsResponse> listed = RegionClient(as(kBobToken)).List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  std::remove(tokens.c_str());
}

}  // namespace
}  // namespace gemmd::testing
