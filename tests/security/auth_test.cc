// Tenants and tokens (--auth_tokens_file): the file's parser, who is let in, what a
// refusal says (never the token), health open without a token, the tenant label of
// gemm_requests_total, resident tensors kept apart per tenant, and reloading the file.
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/channel_security.h"
#include "client/gemm_client.h"
#include "client/tensor_store_client.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kernels/reference_gemm.h"
#include "server/gemm_server.h"
#include "server/security/auth_tokens.h"
#include "server/store/tensor_store.h"
#include "tests/metrics_util.h"
#include "tests/security/matmul_check.h"
#include "tests/server_fixture.h"

namespace gemmd {
namespace {

constexpr char kAliceToken[] = "alice-0123456789abcdef";
constexpr char kBobToken[] = "bob-fedcba9876543210";
constexpr char kCarolToken[] = "carol-00112233445566778899";

TEST(TokenTableTest, ParsesTenantsCommentsAndSeveralTokensPerTenant) {
  absl::StatusOr<TokenTable> table = TokenTable::Parse(
      "# tenants of the test\n"
      "\n"
      "alice:alice-0123456789abcdef\n"
      "  bob : bob-fedcba9876543210  \n"
      "alice:alice-second-token-0001\n",
      "tokens");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 3u);
  EXPECT_EQ(table->tenants(), (std::vector<std::string>{"alice", "bob"}));
  ASSERT_NE(table->Find("alice-0123456789abcdef"), nullptr);
  EXPECT_EQ(*table->Find("alice-0123456789abcdef"), "alice");
  EXPECT_EQ(*table->Find("alice-second-token-0001"), "alice");
  EXPECT_EQ(*table->Find("bob-fedcba9876543210"), "bob");
  EXPECT_EQ(table->Find("bob-fedcba987654321"), nullptr);  // a prefix
  EXPECT_EQ(table->Find(""), nullptr);
}

TEST(TokenTableTest, RefusesBadLinesNamingTheLine) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"alice alice-0123456789abcdef\n", "tokens line 1: expected tenant:token"},
      {"# c\nal ice:alice-0123456789abcdef\n", "tokens line 2: tenant names are 1-64"},
      {":alice-0123456789abcdef\n", "tenant names are 1-64"},
      {"alice:short\n", "tokens line 1: token shorter than 16 characters"},
      {"alice:alice 0123456789abcdef\n", "printable ASCII without spaces"},
      {"alice:alice-0123456789abcdef\nbob:alice-0123456789abcdef\n",
       "tokens line 2: this token is already given (to tenant alice)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TokenTable> table = TokenTable::Parse(c.text, "tokens");
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(absl::StrContains(table.status().message(), c.message))
        << c.text << " -> " << table.status();
  }
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  const std::string aside = path + ".new";
  std::ofstream(aside) << text;
  std::rename(aside.c_str(), path.c_str());
  return path;
}

class AuthServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A file of this process's own: ctest runs the tests of this fixture in parallel
    // processes, and some rewrite it.
    tokens_name_ = absl::StrCat("auth_test_tokens_", getpid());
    tokens_file_ = WriteFile(tokens_name_,
                             absl::StrCat("alice:", kAliceToken, "\nbob:", kBobToken, "\n"));
    ServerConfig config = testing::TestConfig();
    config.backend = "cpu";
    config.auth_tokens_file = tokens_file_;
    config.tensor_store_bytes = 64 << 20;
    absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  Endpoint As(const std::string& token) const {
    ChannelSecurity security;
    security.token = token;
    return Endpoint(absl::StrCat("127.0.0.1:", server_->port()), security);
  }

  grpc::Status Info(const std::string& token) {
    auto stub = gemm::v1::GemmService::NewStub(ConnectChannel(As(token)));
    grpc::ClientContext context;
    gemm::v1::ServerInfo info;
    return stub->GetServerInfo(&context, {}, &info);
  }

  std::string tokens_name_;
  std::string tokens_file_;
  std::unique_ptr<GemmServer> server_;
};

TEST_F(AuthServerTest, CallsWithoutAValidTokenAreUnauthenticatedAndTheTokenIsNeverEchoed) {
  grpc::Status none = Info("");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(none.error_message(), "authorization: Bearer TOKEN"))
      << none.error_message();
  const std::string wrong = "mallory-0123456789abcdef";
  grpc::Status unknown = Info(wrong);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(unknown.error_message(), "unknown token");

  // Matmul, refused at its headers.
  GemmClient client(ConnectChannel(As(wrong)));
  const std::vector<float> a(4 * 4, 1.0f), b(4 * 4, 1.0f);
  MatmulArgs args;
  args.a = {{4, 4}, gemm::v1::DATA_TYPE_FLOAT32, {reinterpret_cast<const char*>(a.data()), 64}};
  args.b = {{4, 4}, gemm::v1::DATA_TYPE_FLOAT32, {reinterpret_cast<const char*>(b.data()), 64}};
  MatmulResult result;
  const absl::Status s = client.Matmul(args, {}, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), wrong));

  // PutTensor and ListTensors too.
  TensorStoreClient store(ConnectChannel(As("")));
  EXPECT_EQ(store.PutTensor(args.a).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(store.ListTensors().status().code(), absl::StatusCode::kUnauthenticated);

  // Counted without a tenant label: 2 GetServerInfo, 1 Matmul, 1 PutTensor.
  ServerMetrics& m = server_->metrics();
  EXPECT_EQ(testing::RequestsCounted(m, "GetServerInfo", "UNAUTHENTICATED"), 2);
  EXPECT_EQ(testing::RequestsCounted(m, "Matmul", "UNAUTHENTICATED"), 1);
  EXPECT_EQ(testing::RequestsCounted(m, "PutTensor", "UNAUTHENTICATED"), 1);
}

// A PutTensor refused at its headers returns, every time: the client's stream once waited
// for its payload slices while gRPC still held them for a retry (4 threads of such calls
// hung within a few hundred).
TEST_F(AuthServerTest, PutTensorRefusedAtItsHeadersAlwaysReturns) {
  TensorStoreClient store(ConnectChannel(As("")));
  const std::vector<float> data(64 * 256, 1.0f);
  const TensorRef tensor{{64, 256}, gemm::v1::DATA_TYPE_FLOAT32,
                         {reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)}};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        if (store.PutTensor(tensor).status().code() == absl::StatusCode::kUnauthenticated) {
          ++refused;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(refused.load(), 1000);
}

TEST_F(AuthServerTest, HealthIsOpenWithoutAToken) {
  auto health = grpc::health::v1::Health::NewStub(ConnectChannel(As("")));
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = health->Check(&context, {}, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(AuthServerTest, ValidTokenIsAnsweredCorrectlyAndCountedUnderItsTenant) {
  const absl::StatusOr<double> error =
      testing::RandomMatmulError(ConnectChannel(As(kAliceToken)), 21, 13, 34, 3);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-5);
  EXPECT_TRUE(Info(kBobToken).ok());
  server_->AwaitIdle(absl::Now() + absl::Seconds(10));
  ServerMetrics& metrics = server_->metrics();
  EXPECT_EQ(testing::MetricValue(metrics, "gemm_requests_total",
                                 {{"tenant", "alice"}, {"method", "Matmul"}, {"code", "OK"}}),
            1);
  EXPECT_EQ(testing::MetricValue(metrics, "gemm_requests_total",
                                 {{"tenant", "bob"}, {"method", "GetServerInfo"}, {"code", "OK"}}),
            1);
  EXPECT_EQ(testing::MetricValue(metrics, "gemm_requests_total",
                                 {{"tenant", "bob"}, {"method", "Matmul"}, {"code", "OK"}}),
            -1);  // no such series
}

TEST_F(AuthServerTest, ResidentTensorsBelongToTheirTenant) {
  const int64_t k = 8, n = 6;
  std::vector<float> b(k * n);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) - 3.0f;
  TensorStoreClient alice(ConnectChannel(As(kAliceToken)));
  TensorStoreClient bob(ConnectChannel(As(kBobToken)));
  absl::StatusOr<std::string> handle = alice.PutTensor(
      {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, {reinterpret_cast<const char*>(b.data()), b.size() * 4}});
  ASSERT_TRUE(handle.ok()) << handle.status();

  // Bob cannot see it, use it, read it or delete it: to him it does not exist.
  absl::StatusOr<gemm::v1::ListTensorsResponse> bob_list = bob.ListTensors();
  ASSERT_TRUE(bob_list.ok());
  EXPECT_EQ(bob_list->tensors_size(), 0);
  EXPECT_EQ(bob.GetTensor(*handle).status().code(), absl::StatusCode::kNotFound);
  const absl::Status bob_delete = bob.DeleteTensor(*handle);
  EXPECT_EQ(bob_delete.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(bob_delete.message(), "no tensor")) << bob_delete;
  const std::vector<float> a(2 * k, 1.0f);
  MatmulArgs args;
  args.a = {{2, k}, gemm::v1::DATA_TYPE_FLOAT32, {reinterpret_cast<const char*>(a.data()), a.size() * 4}};
  args.b_ref = *handle;
  MatmulResult result;
  const absl::Status bob_matmul = GemmClient(ConnectChannel(As(kBobToken))).Matmul(args, {}, &result);
  EXPECT_EQ(bob_matmul.code(), absl::StatusCode::kNotFound) << bob_matmul;

  // Alice can, and the product is right (each column sum of B).
  absl::StatusOr<gemm::v1::ListTensorsResponse> alice_list = alice.ListTensors();
  ASSERT_TRUE(alice_list.ok());
  ASSERT_EQ(alice_list->tensors_size(), 1);
  EXPECT_EQ(alice_list->tensors(0).handle().handle(), *handle);
  ASSERT_TRUE(GemmClient(ConnectChannel(As(kAliceToken))).Matmul(args, {}, &result).ok());
  const float* c = reinterpret_cast<const float*>(result.c().data());
  for (int64_t j = 0; j < n; ++j) {
    double column = 0;
    for (int64_t i = 0; i < k; ++i) column += b[i * n + j];
    EXPECT_EQ(c[j], column) << j;
  }
  EXPECT_TRUE(alice.DeleteTensor(*handle).ok());
}

TEST_F(AuthServerTest, ReloadTakesNewTokensAndKeepsTheOldOnesWhenTheFileIsBad) {
  EXPECT_EQ(Info(kCarolToken).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  WriteFile(tokens_name_, absl::StrCat("alice:", kAliceToken, "\ncarol:", kCarolToken, "\n"));
  ASSERT_TRUE(server_->ReloadTokens().ok());
  EXPECT_TRUE(Info(kCarolToken).ok());
  EXPECT_EQ(Info(kBobToken).error_code(), grpc::StatusCode::UNAUTHENTICATED);  // removed

  WriteFile(tokens_name_, "alice:short\n");
  const absl::Status bad = server_->ReloadTokens();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "line 1: token shorter")) << bad;
  EXPECT_TRUE(Info(kCarolToken).ok()) << "a bad file must leave the tokens in use";
  EXPECT_TRUE(Info(kAliceToken).ok());
}

// A tenant the reloaded file no longer names cannot reach its tensors again: they are
// deleted at the reload (they stayed, counted against the store, until a restart).
TEST_F(AuthServerTest, AReloadThatRemovesATenantDeletesItsTensors) {
  const std::vector<float> values(16, 2.0f);
  const TensorRef tensor{
      {4, 4}, gemm::v1::DATA_TYPE_FLOAT32, {reinterpret_cast<const char*>(values.data()), 64}};
  TensorStoreClient alice(ConnectChannel(As(kAliceToken)));
  TensorStoreClient bob(ConnectChannel(As(kBobToken)));
  ASSERT_TRUE(bob.PutTensor(tensor).ok());
  ASSERT_TRUE(bob.PutTensor(tensor).ok());
  absl::StatusOr<std::string> kept = alice.PutTensor(tensor);
  ASSERT_TRUE(kept.ok());
  const int64_t one = server_->store()->ChargeFor(64, 0);
  EXPECT_EQ(server_->store()->used_bytes(), 3 * one);
  WriteFile(tokens_name_, absl::StrCat("alice:", kAliceToken, "\n"));
  ASSERT_TRUE(server_->ReloadTokens().ok());
  EXPECT_EQ(server_->store()->used_bytes(), one);
  EXPECT_EQ(server_->store()->tensor_count(), 1);
  EXPECT_TRUE(alice.GetTensor(*kept).ok());
}

TEST(AuthStartTest, ABadTokensFileStopsTheStart) {
  ServerConfig config = testing::TestConfig();
  config.backend = "cpu";
  config.auth_tokens_file = WriteFile(absl::StrCat("auth_test_empty_", getpid()), "# nobody\n");
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "no tenant:token line"))
      << server.status();
  config.auth_tokens_file = "/nonexistent/tokens";
  server = GemmServer::Create(config);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "No such file")) << server.status();
}

TEST(TenantLimitsTest, EachTenantHasItsOwnShareOfTheStoreAndOfHostMemory) {
  ServerConfig config = testing::TestConfig();
  config.backend = "cpu";
  config.auth_tokens_file = WriteFile(
      absl::StrCat("auth_test_limits_", getpid()),
      absl::StrCat("alice:", kAliceToken, "\nbob:", kBobToken, "\n"));
  config.tensor_store_bytes = 1 << 20;
  config.tenant_tensor_store_bytes = 6144;  // one small tensor at its real cost: a page, its record
  config.tenant_max_inflight_bytes = 12000;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto as = [&](const char* token) {
    ChannelSecurity security;
    security.token = token;
    return Endpoint(absl::StrCat("127.0.0.1:", (*server)->port()), security);
  };
  const std::vector<float> full(256, 1.0f), one(1, 1.0f);
  const TensorRef kilobyte{{16, 16}, gemm::v1::DATA_TYPE_FLOAT32,
                           {reinterpret_cast<const char*>(full.data()), 1024}};
  const TensorRef four_bytes{{1, 1}, gemm::v1::DATA_TYPE_FLOAT32,
                             {reinterpret_cast<const char*>(one.data()), 4}};

  // The store: alice's kilobyte fills her share (its page and record), not bob's.
  TensorStoreClient alice(ConnectChannel(as(kAliceToken)));
  TensorStoreClient bob(ConnectChannel(as(kBobToken)));
  absl::StatusOr<std::string> first = alice.PutTensor(kilobyte);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::string> over = alice.PutTensor(four_bytes);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "tenant alice"));
  EXPECT_TRUE(absl::StrContains(over.status().message(), "--tenant_tensor_store_bytes"))
      << over.status();
  EXPECT_TRUE(bob.PutTensor(kilobyte).ok());
  ASSERT_TRUE(alice.DeleteTensor(*first).ok());
  EXPECT_TRUE(alice.PutTensor(four_bytes).ok()) << "a deleted tensor's bytes come back";

  // Host memory: a call needing more than 12000 bytes is refused, naming the tenant's cap;
  // a small one of the same tenant is served.
  const int64_t n = 64;
  const std::vector<float> big(n * n, 0.5f);
  MatmulArgs large;
  large.a = {{n, n}, gemm::v1::DATA_TYPE_FLOAT32, {reinterpret_cast<const char*>(big.data()), big.size() * 4}};
  large.b = large.a;
  MatmulResult result;
  const absl::Status refused = GemmClient(ConnectChannel(as(kAliceToken))).Matmul(large, {}, &result);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "tenant alice's calls hold 0 bytes"))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "--tenant_max_inflight_bytes=12000"))
      << refused;
  MatmulArgs small;
  small.a = {{16, 16}, gemm::v1::DATA_TYPE_FLOAT32, {reinterpret_cast<const char*>(full.data()), 1024}};
  small.b = small.a;
  ASSERT_TRUE(GemmClient(ConnectChannel(as(kAliceToken))).Matmul(small, {}, &result).ok());
  EXPECT_EQ(reinterpret_cast<const float*>(result.c().data())[0], 16.0f);
  // And repeatedly: what a call held is given back when it is done.
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(GemmClient(ConnectChannel(as(kAliceToken))).Matmul(small, {}, &result).ok()) << i;
  }
}

TEST(TenantLimitsTest, LimitsNeedTenants) {
  ServerConfig config = testing::TestConfig();
  config.backend = "cpu";
  config.tenant_max_inflight_bytes = 1000;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "need --auth_tokens_file"))
      << server.status();
}

}  // namespace
}  // namespace gemmd
