// TLS and mutual TLS on the gRPC port, through the client library: who is let in, who is
// refused at the handshake, a certificate replaced on disk served to the next connection
// without a restart, the start-up checks of the files, and --metrics_host.
#include <grpcpp/client_context.h>
#include <grpcpp/security/auth_context.h>
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/channel_security.h"
#include "client/gemm_client.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/reference_gemm.h"
#include "server/gemm_server.h"
#include "server/library_logs.h"
#include "server/observability/log.h"
#include "server/security/tls_credentials.h"
#include "tests/security/matmul_check.h"
#include "tests/server_fixture.h"

namespace gemmd {
namespace {

using testing::TestConfig;

// Made once per test binary by tests/security/make_test_certs.sh.
const std::string& CertDir() {
  static const std::string* dir = [] {
    char pattern[] = "/tmp/gemmd-tls-test-XXXXXX";
    const char* made = mkdtemp(pattern);
    EXPECT_NE(made, nullptr);
    auto* d = new std::string(made);
    const std::string command =
        absl::StrCat("sh " GEMMD_SOURCE_DIR "/tests/security/make_test_certs.sh ", *d);
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return d;
  }();
  return *dir;
}

std::string Cert(const std::string& name) { return absl::StrCat(CertDir(), "/", name); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Atomically, as a rotation should be done: written aside, renamed into place.
void ReplaceFile(const std::string& path, const std::string& contents) {
  const std::string aside = path + ".new";
  std::ofstream(aside, std::ios::binary) << contents;
  ASSERT_EQ(std::rename(aside.c_str(), path.c_str()), 0);
}

ServerTlsFiles ServerFiles(bool mutual) {
  ServerTlsFiles files;
  files.cert_file = Cert("server.pem");
  files.key_file = Cert("server.key");
  if (mutual) files.client_ca_file = Cert("ca.pem");
  return files;
}

ChannelSecurity ClientSecurity(const std::string& client_cert = "") {
  ChannelSecurityFiles files;
  files.ca_file = Cert("ca.pem");
  if (!client_cert.empty()) {
    files.cert_file = Cert(client_cert + ".pem");
    files.key_file = Cert(client_cert + ".key");
  }
  absl::StatusOr<ChannelSecurity> security = LoadChannelSecurity(files);
  EXPECT_TRUE(security.ok()) << security.status();
  return security.ok() ? *security : ChannelSecurity{};
}

std::unique_ptr<GemmServer> StartServer(const ServerTlsFiles& tls) {
  ServerConfig config = TestConfig();
  config.backend = "cpu";
  config.tls = tls;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// GetServerInfo over `endpoint` on a fresh connection (channel index `index`); the status,
// and the common name of the certificate the server presented.
struct InfoCall {
  grpc::Status status;
  std::string server_cn;
};
InfoCall CallInfo(const Endpoint& endpoint, int index = 0) {
  auto stub = gemm::v1::GemmService::NewStub(ConnectChannel(endpoint, index));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  gemm::v1::ServerInfo info;
  InfoCall call;
  call.status = stub->GetServerInfo(&context, {}, &info);
  if (call.status.ok()) {
    for (const grpc::string_ref& cn : context.auth_context()->FindPropertyValues("x509_common_name")) {
      call.server_cn.assign(cn.data(), cn.size());
    }
  }
  return call;
}

std::string Target(const GemmServer& server) { return absl::StrCat("127.0.0.1:", server.port()); }

TEST(TlsTest, TlsClientIsServedAndGetsTheRightProduct) {
  std::unique_ptr<GemmServer> server = StartServer(ServerFiles(/*mutual=*/false));
  ASSERT_NE(server, nullptr);
  const Endpoint endpoint(Target(*server), ClientSecurity());
  const InfoCall info = CallInfo(endpoint);
  ASSERT_TRUE(info.status.ok()) << info.status.error_message();
  EXPECT_EQ(info.server_cn, "gemmd-test-server-1");

  // A Matmul over TLS, against the FP64 reference.
  const absl::StatusOr<double> error =
      testing::RandomMatmulError(ConnectChannel(endpoint), 37, 29, 53, 7);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-5);
}

TEST(TlsTest, PlaintextClientIsRefusedByATlsServer) {
  std::unique_ptr<GemmServer> server = StartServer(ServerFiles(/*mutual=*/false));
  ASSERT_NE(server, nullptr);
  const InfoCall info = CallInfo(Endpoint(Target(*server)));
  EXPECT_EQ(info.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << info.status.error_message();
}

TEST(TlsTest, ClientThatDoesNotTrustTheServerRefusesIt) {
  std::unique_ptr<GemmServer> server = StartServer(ServerFiles(/*mutual=*/false));
  ASSERT_NE(server, nullptr);
  ChannelSecurityFiles files;
  files.ca_file = Cert("other_ca.pem");  // not the CA that signed the server
  absl::StatusOr<ChannelSecurity> security = LoadChannelSecurity(files);
  ASSERT_TRUE(security.ok());
  const InfoCall info = CallInfo(Endpoint(Target(*server), *security));
  EXPECT_EQ(info.status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(TlsTest, MutualTlsRefusesClientsWithoutACertificateOfItsCa) {
  std::unique_ptr<GemmServer> server = StartServer(ServerFiles(/*mutual=*/true));
  ASSERT_NE(server, nullptr);
  const std::string target = Target(*server);
  EXPECT_EQ(CallInfo(Endpoint(target, ClientSecurity())).status.error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "no client certificate";
  EXPECT_EQ(CallInfo(Endpoint(target, ClientSecurity("stranger"))).status.error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "a client certificate of another CA";
  EXPECT_EQ(CallInfo(Endpoint(target)).status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << "plaintext";
  const InfoCall ok = CallInfo(Endpoint(target, ClientSecurity("client")));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
}

TEST(TlsTest, ReplacedCertificateIsServedToTheNextConnectionWithoutRestart) {
  // The server watches copies, which the test replaces.
  const std::string dir = Cert("rotation");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  ServerTlsFiles files;
  files.cert_file = dir + "/server.pem";
  files.key_file = dir + "/server.key";
  files.refresh = absl::Seconds(1);
  ReplaceFile(files.cert_file, ReadFile(Cert("server.pem")));
  ReplaceFile(files.key_file, ReadFile(Cert("server.key")));
  std::unique_ptr<GemmServer> server = StartServer(files);
  ASSERT_NE(server, nullptr);
  const Endpoint endpoint(Target(*server), ClientSecurity());
  ASSERT_EQ(CallInfo(endpoint, 0).server_cn, "gemmd-test-server-1");

  // The key first, then the certificate: in between gRPC sees a pair that does not
  // match and keeps serving the old one.
  ReplaceFile(files.key_file, ReadFile(Cert("server2.key")));
  ReplaceFile(files.cert_file, ReadFile(Cert("server2.pem")));
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  std::string served;
  int index = 1;
  while (absl::Now() < deadline) {
    const InfoCall call = CallInfo(endpoint, index++);  // a new connection each time
    ASSERT_TRUE(call.status.ok()) << call.status.error_message();
    served = call.server_cn;
    if (served == "gemmd-test-server-2") break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(served, "gemmd-test-server-2")
      << "the replaced certificate was not served within 15 s (refresh 1 s)";
}

// Rotation as the README describes it: the new key moved into place first, the
// certificate some seconds later. In between, and while a file holds garbage or a
// certificate of another key, the old pair serves every new connection (gRPC alone served
// the mismatched pair, and every handshake failed until the certificate followed); the
// refusal is logged once.
class TlsRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = Cert(absl::StrCat("rotation_", ::testing::UnitTest::GetInstance()->random_seed(), "_",
                             getpid(), "_", counter_++));
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir_).c_str()), 0);
    files_.cert_file = dir_ + "/server.pem";
    files_.key_file = dir_ + "/server.key";
    files_.refresh = absl::Seconds(1);
    ReplaceFile(files_.cert_file, ReadFile(Cert("server.pem")));
    ReplaceFile(files_.key_file, ReadFile(Cert("server.key")));
    server_ = StartServer(files_);
    ASSERT_NE(server_, nullptr);
    endpoint_ = Endpoint(Target(*server_), ClientSecurity());
    ASSERT_EQ(CallInfo(*endpoint_, 0).server_cn, "gemmd-test-server-1");
  }

  // New connections for `d`: every one must be served, by `cn`.
  void ExpectServedBy(const std::string& cn, absl::Duration d) {
    const absl::Time end = absl::Now() + d;
    while (absl::Now() < end) {
      const InfoCall call = CallInfo(*endpoint_, index_++);
      ASSERT_TRUE(call.status.ok()) << call.status.error_message();
      ASSERT_EQ(call.server_cn, cn);
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  // Within `d`, new connections are served by `cn`.
  bool EventuallyServedBy(const std::string& cn, absl::Duration d) {
    const absl::Time end = absl::Now() + d;
    while (absl::Now() < end) {
      const InfoCall call = CallInfo(*endpoint_, index_++);
      EXPECT_TRUE(call.status.ok()) << call.status.error_message();
      if (call.server_cn == cn) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  }

  static int counter_;
  std::string dir_;
  ServerTlsFiles files_;
  std::unique_ptr<GemmServer> server_;
  std::optional<Endpoint> endpoint_;
  int index_ = 1;
};
int TlsRotationTest::counter_ = 0;

TEST_F(TlsRotationTest, AKeyMovedBeforeItsCertificateLeavesTheOldPairServing) {
  ReplaceFile(files_.key_file, ReadFile(Cert("server2.key")));
  ExpectServedBy("gemmd-test-server-1", absl::Milliseconds(2500));  // > 2 refreshes
  ReplaceFile(files_.cert_file, ReadFile(Cert("server2.pem")));
  EXPECT_TRUE(EventuallyServedBy("gemmd-test-server-2", absl::Seconds(10)));
}

TEST_F(TlsRotationTest, GarbageOrAMismatchedCertificateIsRefusedAndTheOldPairServes) {
  ::testing::internal::CaptureStderr();
  SetLogEnabled(true);
  ReplaceFile(files_.cert_file, "-----BEGIN CERTIFICATE-----\ngarbage\n");
  ExpectServedBy("gemmd-test-server-1", absl::Milliseconds(2500));
  ReplaceFile(files_.cert_file, ReadFile(Cert("server2.pem")));  // not server.key's
  ExpectServedBy("gemmd-test-server-1", absl::Milliseconds(2500));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(absl::StrContains(log, "event=tls_rotation_refused")) << log;
  EXPECT_TRUE(absl::StrContains(log, "does not belong to the certificate")) << log;
  // Each refused content is logged once, not at every refresh.
  EXPECT_LE(std::count(log.begin(), log.end(), '\n'), 3) << log;
  ReplaceFile(files_.key_file, ReadFile(Cert("server2.key")));
  EXPECT_TRUE(EventuallyServedBy("gemmd-test-server-2", absl::Seconds(10)));
}

// A PEM certificate for `key_pem` whose validity ended a day ago.
std::string ExpiredCertificate(const std::string& key_pem) {
  BIO* bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  X509* cert = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 7);
  X509_gmtime_adj(X509_getm_notBefore(cert), -2 * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert), -86400);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("expired"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509_sign(cert, key, EVP_sha256());
  BIO* out = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(out, cert);
  char* data = nullptr;
  const long length = BIO_get_mem_data(out, &data);
  std::string pem(data, static_cast<size_t>(length));
  BIO_free(out);
  X509_free(cert);
  EVP_PKEY_free(key);
  return pem;
}

// A server started with an expired certificate said nothing: now it logs why clients
// will refuse it (and one close to its end is warned about).
TEST(TlsTest, AnExpiredOrExpiringCertificateIsLoggedAtStart) {
  const std::string expired = Cert("expired.pem");
  ReplaceFile(expired, ExpiredCertificate(ReadFile(Cert("server.key"))));
  ServerTlsFiles files = ServerFiles(false);
  files.cert_file = expired;
  ::testing::internal::CaptureStderr();
  SetLogEnabled(true);
  std::unique_ptr<GemmServer> server = StartServer(files);
  ASSERT_NE(server, nullptr);
  server.reset();
  std::unique_ptr<GemmServer> soon = StartServer(ServerFiles(false));  // made for 2 days
  ASSERT_NE(soon, nullptr);
  soon.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(absl::StrContains(log, "event=tls_certificate_expired")) << log;
  EXPECT_TRUE(absl::StrContains(log, "event=tls_certificate_expires_soon")) << log;
  EXPECT_TRUE(absl::StrContains(log, "days_left=1")) << log;
}

// 2000 junk connections to a TLS port once wrote 2000 unthrottled grpc_log lines. gRPC's
// lines now go through the server's logfmt with a rate limit.
TEST(TlsTest, JunkConnectionsDoNotFloodTheLog) {
  RouteLibraryLogs();
  std::unique_ptr<GemmServer> server = StartServer(ServerFiles(false));
  ASSERT_NE(server, nullptr);
  ::testing::internal::CaptureStderr();
  SetLogEnabled(true);
  const absl::Time start = absl::Now();
  for (int i = 0; i < 300; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
      (void)!write(fd, junk, sizeof(junk) - 1);
    }
    close(fd);
  }
  absl::SleepFor(absl::Seconds(1));
  server.reset();  // gRPC logs while it shuts down too: the bound counts that time
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string log = ::testing::internal::GetCapturedStderr();
  int grpc_lines = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "ts=")) << line;  // logfmt, nothing raw
    if (absl::StrContains(line, "event=grpc_log")) ++grpc_lines;
  }
  EXPECT_GT(grpc_lines, 0) << log;
  EXPECT_LE(grpc_lines, 20 + 10 * seconds + 2) << log;
}

TEST(TlsTest, BadFilesAreRefusedAtStartNamingTheFlag) {
  ServerTlsFiles files = ServerFiles(false);
  files.key_file = Cert("client.key");  // another certificate's key
  absl::Status s = CheckServerTlsFiles(files);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "--tls_key_file")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "does not belong to the certificate")) << s;

  files = ServerFiles(false);
  files.cert_file = Cert("missing.pem");
  s = CheckServerTlsFiles(files);
  EXPECT_TRUE(absl::StrContains(s.message(), "--tls_cert_file")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "No such file")) << s;

  files = ServerFiles(false);
  files.cert_file = Cert("server.key");  // a key where a certificate belongs
  s = CheckServerTlsFiles(files);
  EXPECT_TRUE(absl::StrContains(s.message(), "no PEM certificate")) << s;

  files = ServerFiles(false);
  files.key_file.clear();
  s = CheckServerTlsFiles(files);
  EXPECT_TRUE(absl::StrContains(s.message(), "go together")) << s;

  files = {};
  files.client_ca_file = Cert("ca.pem");
  s = CheckServerTlsFiles(files);
  EXPECT_TRUE(absl::StrContains(s.message(), "--tls_client_ca_file needs")) << s;

  // And GemmServer::Create says the same, before binding anything.
  ServerConfig config = TestConfig();
  config.backend = "cpu";
  config.tls = ServerFiles(false);
  config.tls.key_file = Cert("client.key");
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TlsTest, ClientSecurityFilesAreCheckedWhenLoaded) {
  ChannelSecurityFiles files;
  files.ca_file = Cert("nope.pem");
  absl::Status s = LoadChannelSecurity(files).status();
  EXPECT_TRUE(absl::StrContains(s.message(), "--tls_ca_file")) << s;
  files = {};
  files.cert_file = Cert("client.pem");
  s = LoadChannelSecurity(files).status();
  EXPECT_TRUE(absl::StrContains(s.message(), "go together")) << s;
  files.key_file = Cert("client.pem");  // a certificate where the key belongs
  s = LoadChannelSecurity(files).status();
  EXPECT_TRUE(absl::StrContains(s.message(), "no PEM private key")) << s;
  files = {};
  files.token = "two words";
  s = LoadChannelSecurity(files).status();
  EXPECT_TRUE(absl::StrContains(s.message(), "space")) << s;
}

// /metrics bound to --metrics_host while gRPC listens on every interface: the kernel's
// socket table shows the listening address.
TEST(TlsTest, MetricsHostBindsTheMetricsEndpointApart) {
  ServerConfig config = TestConfig();
  config.backend = "cpu";
  config.host = "0.0.0.0";
  config.metrics_host = "127.0.0.1";
  config.metrics_port = 0;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  ASSERT_TRUE(server.ok()) << server.status();
  // The local addresses (hex, as the kernel writes them) of the sockets listening on
  // `port`, IPv4 and IPv6.
  auto listening_on = [](int port) {
    std::vector<std::string> addresses;
    char hex_port[8];
    std::snprintf(hex_port, sizeof(hex_port), ":%04X", port);
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream tcp(table);
      std::string line;
      std::getline(tcp, line);  // header
      while (std::getline(tcp, line)) {
        std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
        // local_address "IP:PORT", state 0A = LISTEN
        if (fields.size() > 3 && fields[3] == "0A" && absl::EndsWith(fields[1], hex_port)) {
          addresses.push_back(fields[1].substr(0, fields[1].size() - 5));
        }
      }
    }
    return absl::StrJoin(addresses, ",");
  };
  EXPECT_EQ(listening_on((*server)->metrics_port()), "0100007F");  // 127.0.0.1 alone
  // gRPC on every interface: 0.0.0.0, or [::] (dual stack).
  const std::string grpc_addresses = listening_on((*server)->port());
  EXPECT_TRUE(grpc_addresses == "00000000" ||
              grpc_addresses == "00000000000000000000000000000000")
      << grpc_addresses;
}

}  // namespace
}  // namespace gemmd
