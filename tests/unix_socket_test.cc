// gemm-server --unix_socket: gemm-cli calls it over unix:PATH (one connection and
// striped), a second server on a path a live one answers on is refused with the reason,
// a socket left by a server that died is taken over, and a path that is not a socket is
// refused.
#include <signal.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/child_process.h"

namespace gemmd::testing {
namespace {

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "gemmd_unix_", getpid());
    mkdir(dir_.c_str(), 0700);
    path_ = dir_ + "/gemmd.sock";
    std::remove(path_.c_str());
  }
  void TearDown() override {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }

  std::unique_ptr<ChildProcess> Server() {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        GEMM_SERVER_BINARY, "--backend=cpu", "--host=127.0.0.1", "--port=0",
        "--metrics_port=-1", absl::StrCat("--unix_socket=", path_)});
  }

  // gemm-cli matmul over the socket; its exit code (output in *out).
  int Matmul(std::vector<std::string> flags, std::string* out) {
    std::vector<std::string> argv = {GEMM_CLI_BINARY, "matmul", "--verify",
                                     absl::StrCat("--target=unix:", path_)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ChildProcess cli(argv);
    const int code = cli.Wait(absl::Seconds(120));
    *out = cli.out() + cli.err();
    return code;
  }

  std::string dir_, path_;
};

TEST_F(UnixSocketTest, ServesTheCliAndRefusesATakenPath) {
  std::unique_ptr<ChildProcess> server = Server();
  ASSERT_GT(StartedServerPort(*server), 0) << server->err();
  EXPECT_TRUE(absl::StrContains(server->err(), absl::StrCat("unix_socket=", path_)))
      << server->err();
  std::string out;
  EXPECT_EQ(Matmul({"--m=64", "--n=48", "--k=32"}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "PASS")) << out;
  // Striped over the same socket: every connection reaches this one process.
  EXPECT_EQ(Matmul({"--m=1024", "--n=512", "--k=512", "--stripes=3"}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "over 3 connections")) << out;
  EXPECT_TRUE(absl::StrContains(out, "PASS")) << out;

  // A second server on the same path: refused, saying why (gRPC alone would take it).
  std::unique_ptr<ChildProcess> second = Server();
  EXPECT_NE(second->Wait(absl::Seconds(30)), 0);
  EXPECT_TRUE(absl::StrContains(second->err(), "a server is listening on")) << second->err();
  EXPECT_EQ(Matmul({"--m=8", "--n=8", "--k=8"}, &out), 0) << out;  // the first still serves

  // Killed, the first leaves its socket file; the next server takes the path over.
  kill(server->pid(), SIGKILL);
  server->Wait(absl::Seconds(10));
  struct stat st {};
  ASSERT_EQ(lstat(path_.c_str(), &st), 0);
  server = Server();
  ASSERT_GT(StartedServerPort(*server), 0) << server->err();
  EXPECT_EQ(Matmul({"--m=8", "--n=8", "--k=8"}, &out), 0) << out;
}

TEST_F(UnixSocketTest, APathThatIsNotASocketIsRefused) {
  std::ofstream(path_) << "not a socket";
  std::unique_ptr<ChildProcess> server = Server();
  EXPECT_NE(server->Wait(absl::Seconds(30)), 0);
  EXPECT_TRUE(absl::StrContains(server->err(), "exists and is not a socket")) << server->err();
  std::ifstream still(path_);
  std::string content;
  std::getline(still, content);
  EXPECT_EQ(content, "not a socket");  // left as it was
}

}  // namespace
}  // namespace gemmd::testing
