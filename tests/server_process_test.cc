// The gemm-server and gemm-cli binaries as processes: signals (a second SIGTERM during
// the drain changes nothing; exit status 0 with every call OK or UNAVAILABLE), how long
// an idle server takes to stop, --version, and a port already taken.
#include <fcntl.h>
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "tests/server_fixture.h"

extern char** environ;

namespace gemmd {
namespace {

using ::gemmd::testing::ChannelTo;
using ::gemmd::testing::RandomRequest;

// A child process with its stderr collected by a thread (the server logs as it runs and
// must never block on a full pipe).
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    int pipe_fds[2];
    EXPECT_EQ(pipe(pipe_fds), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_fds[1]);
    reader_ = std::thread([this, fd = pipe_fds[0]] {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
        absl::MutexLock lock(&mu_);
        output_.append(buffer, static_cast<size_t>(n));
      }
      close(fd);
    });
  }

  ~Child() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      Wait(absl::Seconds(10));
    }
    if (reader_.joinable()) reader_.join();
  }

  pid_t pid() const { return pid_; }

  std::string output() {
    absl::MutexLock lock(&mu_);
    return output_;
  }

  // Waits until the output contains `text`; false at `timeout`.
  bool AwaitOutput(const std::string& text, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto found = [this, &text]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return absl::StrContains(output_, text);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
  }

  // The exit status (waitpid's), or -1 if it is still running after `timeout`. Once it
  // has exited, output() holds all it wrote (the reader has met the pipe's end).
  int Wait(absl::Duration timeout) {
    const absl::Time limit = absl::Now() + timeout;
    while (absl::Now() < limit) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        if (reader_.joinable()) reader_.join();
        return status;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::thread reader_;
  absl::Mutex mu_;
  std::string output_ ABSL_GUARDED_BY(mu_);
};

// The port of a started server, from its server_started line ("grpc=127.0.0.1:PORT").
int StartedPort(Child& server) {
  if (!server.AwaitOutput("event=server_started", absl::Seconds(30))) return -1;
  const std::string out = server.output();
  const size_t at = out.find("grpc=127.0.0.1:");
  if (at == std::string::npos) return -1;
  const size_t begin = at + std::string("grpc=127.0.0.1:").size();
  int port = -1;
  if (!absl::SimpleAtoi(out.substr(begin, out.find(' ', begin) - begin), &port)) return -1;
  return port;
}

// Two SIGTERMs (and a SIGINT) in the middle of load: the drain runs to its end, every
// call gets OK or UNAVAILABLE, and the exit status is 0. (Before: the second signal
// landed on an OpenBLAS thread that had it unblocked and killed the process, 143, with
// accepted calls reset.)
TEST(ServerProcessTest, RepeatedStopSignalsUnderLoadStillDrainToExitZero) {
  Child server({GEMM_SERVER_BINARY, "--backend=cpu", "--host=127.0.0.1", "--port=0",
                "--metrics_port=-1", "--shutdown_grace_s=10"});
  const int port = StartedPort(server);
  ASSERT_GT(port, 0) << server.output();

  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::map<grpc::StatusCode, int> codes;
  std::map<grpc::StatusCode, std::string> examples;
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&, t] {
      auto stub = gemm::v1::GemmService::NewStub(ChannelTo(port));
      const gemm::v1::MatmulRequest request = RandomRequest(160, 160, 160, t);
      while (!stop.load()) {
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
        gemm::v1::MatmulResponse response;
        const grpc::Status status = stub->Matmul(&context, request, &response);
        absl::MutexLock lock(&mu);
        ++codes[status.error_code()];
        examples[status.error_code()] = status.error_message();
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time signalled = absl::Now();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  absl::SleepFor(absl::Milliseconds(30));
  kill(server.pid(), SIGTERM);
  absl::SleepFor(absl::Milliseconds(30));
  kill(server.pid(), SIGINT);
  absl::SleepFor(absl::Milliseconds(400));  // calls keep coming while it drains
  stop.store(true);
  for (std::thread& t : clients) t.join();
  const int status = server.Wait(absl::Seconds(20));
  const absl::Duration took = absl::Now() - signalled;
  ASSERT_NE(status, -1) << "still running; output:\n" << server.output();
  EXPECT_TRUE(WIFEXITED(status)) << "status " << status << "\n" << server.output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << server.output();
  EXPECT_LT(took, absl::Seconds(5));
  const std::string out = server.output();
  EXPECT_TRUE(absl::StrContains(out, "event=signal_received signal=SIGTERM action=")) << out;
  EXPECT_TRUE(absl::StrContains(out, "event=shutdown_complete")) << out;
  absl::MutexLock lock(&mu);
  EXPECT_GT(codes[grpc::StatusCode::OK], 0);
  for (const auto& [code, count] : codes) {
    EXPECT_TRUE(code == grpc::StatusCode::OK || code == grpc::StatusCode::UNAVAILABLE)
        << count << " calls got " << code << ": " << examples[code];
  }
}

// An idle server stops at once, metrics port open and all. (Before: 1.1 s, the metrics
// web server's teardown.)
TEST(ServerProcessTest, AnIdleServerStopsAtOnce) {
  Child server({GEMM_SERVER_BINARY, "--backend=cpu", "--host=127.0.0.1", "--port=0",
                "--metrics_port=0"});
  ASSERT_GT(StartedPort(server), 0) << server.output();
  const absl::Time signalled = absl::Now();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  const int status = server.Wait(absl::Seconds(20));
  ASSERT_NE(status, -1);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_LT(absl::Now() - signalled, absl::Milliseconds(600));
}

// A second server on a taken port fails to start, says why in one logfmt line, and
// exits 1. (Before: it started and shared the traffic.)
TEST(ServerProcessTest, ATakenPortStopsTheSecondServerWithTheReason) {
  Child first({GEMM_SERVER_BINARY, "--backend=cpu", "--host=127.0.0.1", "--port=0",
               "--metrics_port=-1"});
  const int port = StartedPort(first);
  ASSERT_GT(port, 0);
  Child second({GEMM_SERVER_BINARY, "--backend=cpu", "--host=127.0.0.1",
                absl::StrCat("--port=", port), "--metrics_port=-1"});
  const int status = second.Wait(absl::Seconds(30));
  ASSERT_NE(status, -1);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string out = second.output();
  EXPECT_TRUE(absl::StrContains(
      out, absl::StrCat("event=start_failed code=UNAVAILABLE message=\"cannot serve gRPC on "
                        "127.0.0.1:",
                        port, ": Address already in use\"")))
      << out;
  // gRPC's own complaint comes as a logfmt line too, not a multi-line dump.
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (line.empty()) continue;
    EXPECT_TRUE(absl::StartsWith(line, "ts=")) << line;
  }
  kill(first.pid(), SIGTERM);
  EXPECT_EQ(WEXITSTATUS(first.Wait(absl::Seconds(20))), 0);
}

// gemm-cli checks a request against the server's advertised limits and its own memory
// before it allocates or sends anything, and its flags before it calls. (Before:
// std::bad_alloc, exit 134, for a 100000 x 100000 operand; 28 s of upload before gRPC's
// size error; a missing --out directory noticed after the server did the work.)
TEST(ServerProcessTest, TheCliRefusesWhatCannotWorkBeforeSendingIt) {
  Child server({GEMM_SERVER_BINARY, "--backend=cpu", "--host=127.0.0.1", "--port=0",
                "--metrics_port=-1", "--max_message_bytes=1048576"});
  const int port = StartedPort(server);
  ASSERT_GT(port, 0);
  const std::string target = absl::StrCat("--target=127.0.0.1:", port);
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"matmul", "--m=100000", "--n=8", "--k=100000"},
       "error: an operand would have 10000000000 elements; the server accepts at most "
       "134217728 per operand (its --max_elements)"},
      {{"quantized", "--m=100000", "--n=8", "--k=100000"}, "error: an operand would have"},
      {{"bench", "--m=100000", "--n=8", "--k=100000"}, "error: an operand would have"},
      {{"matmul", "--batch=100000000"}, "error: an operand would have"},
      {{"matmul", "--m=1024", "--n=8", "--k=1024"},
       "error: the request would carry 4227072 bytes of operands; the server accepts messages "
       "of at most 1048576 (its --max_message_bytes)"},
      {{"matmul", "--m=8", "--n=8", "--k=8", "--out=/nonexistent-dir/c.npy"},
       "error: --out /nonexistent-dir/c.npy: the directory /nonexistent-dir does not exist"},
      {{"matmul", "--timeout_s=0"}, "error: --timeout_s must be a number of seconds > 0, not 0"},
      {{"matmul", "--timeout_s=-1"}, "error: --timeout_s must be a number of seconds > 0"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {GEMM_CLI_BINARY};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.push_back(target);
    const absl::Time start = absl::Now();
    Child cli(argv);
    const int status = cli.Wait(absl::Seconds(30));
    EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << c.args[0];
    EXPECT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 1) << cli.output();
    EXPECT_TRUE(absl::StartsWith(cli.output(), c.message)) << cli.output();
  }
  // Nothing reached the server's Matmul: every refusal happened in the client.
  Child check({GEMM_CLI_BINARY, "matmul", "--m=8", "--n=8", "--k=8", "--verify", target});
  EXPECT_EQ(WEXITSTATUS(check.Wait(absl::Seconds(30))), 0) << check.output();
  kill(server.pid(), SIGTERM);
  EXPECT_EQ(WEXITSTATUS(server.Wait(absl::Seconds(20))), 0);
  EXPECT_FALSE(absl::StrContains(server.output(), "event=request_failed")) << server.output();
}

// A flag of another command is an error naming the flag and the command, before any
// call; `<command> --help` lists that command's flags alone, with no source paths.
TEST(ServerProcessTest, TheCliScopesFlagsToTheirCommand) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"health", "--m=5"}, "error: --m does not apply to 'gemm-cli health'; its flags: "},
      {{"matmul", "--concurrency", "8"},
       "error: --concurrency does not apply to 'gemm-cli matmul'; its flags: "},
  };
  for (const auto& [args, message] : refused) {
    std::vector<std::string> argv = {GEMM_CLI_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    Child cli(argv);
    const int status = cli.Wait(absl::Seconds(30));
    EXPECT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 1) << cli.output();
    EXPECT_TRUE(absl::StartsWith(cli.output(), message)) << cli.output();
  }
  Child help({GEMM_CLI_BINARY, "matmul", "--help"});
  EXPECT_EQ(WEXITSTATUS(help.Wait(absl::Seconds(30))), 0);
  EXPECT_TRUE(absl::StartsWith(help.output(), "gemm-cli matmul: ")) << help.output();
  EXPECT_TRUE(absl::StrContains(help.output(), "--verify")) << help.output();
  EXPECT_FALSE(absl::StrContains(help.output(), "--concurrency")) << help.output();
  EXPECT_FALSE(absl::StrContains(help.output(), ".cc")) << help.output();
}

TEST(ServerProcessTest, VersionSaysWhatItIs) {
  for (const char* binary : {GEMM_SERVER_BINARY, GEMM_CLI_BINARY}) {
    Child child({binary, "--version"});
    EXPECT_EQ(WEXITSTATUS(child.Wait(absl::Seconds(20))), 0);
    const std::string out = child.output();
    const std::string name = absl::StrContains(binary, "gemm-cli") ? "gemm-cli" : "gemm-server";
    EXPECT_TRUE(absl::StartsWith(out, absl::StrCat(name, " 0.1.0 (gemmd"))) << out;
    EXPECT_FALSE(absl::StrContains(out, "Debug build")) << out;
  }
}

// --help named the flags "Flags from tmp/.../server/main.cc", wherever the binary was
// built; now gemm-server's own.
TEST(ServerProcessTest, HelpNamesTheServersFlagsByTheBinary) {
  Child help({GEMM_SERVER_BINARY, "--help"});
  help.Wait(absl::Seconds(20));
  EXPECT_TRUE(absl::StrContains(help.output(), "Flags from gemm-server:")) << help.output();
  EXPECT_FALSE(absl::StrContains(help.output(), "main.cc")) << help.output();
  EXPECT_TRUE(absl::StrContains(help.output(), "--upload_idle_timeout_s")) << help.output();
  EXPECT_TRUE(absl::StrContains(help.output(), "--tensor_store_max_tensors")) << help.output();
}

// A TLS server refuses a plaintext client and a TLS client without the certificate it
// wants; gRPC says only "Socket closed", gemm-cli says what is likely missing. A token
// sent in plaintext is warned about.
TEST(ServerProcessTest, TheCliSaysWhatIsLikelyMissingWhenTlsIsRefused) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "process_certs_", getpid());
  Child certs({"/bin/sh", "-c",
               absl::StrCat("mkdir -p ", dir, " && sh ", GEMM_SOURCE_DIR,
                            "/tests/security/make_test_certs.sh ", dir, " >/dev/null 2>&1")});
  ASSERT_EQ(WEXITSTATUS(certs.Wait(absl::Seconds(60))), 0) << certs.output();
  Child server({GEMM_SERVER_BINARY, "--backend=cpu", "--host=127.0.0.1", "--port=0",
                "--metrics_port=-1", absl::StrCat("--tls_cert_file=", dir, "/server.pem"),
                absl::StrCat("--tls_key_file=", dir, "/server.key"),
                absl::StrCat("--tls_client_ca_file=", dir, "/ca.pem")});
  const int port = StartedPort(server);
  ASSERT_GT(port, 0) << server.output();
  const std::string target = absl::StrCat("--target=127.0.0.1:", port);
  Child plaintext({GEMM_CLI_BINARY, "info", target, "--timeout_s=5"});
  EXPECT_EQ(WEXITSTATUS(plaintext.Wait(absl::Seconds(30))), 1);
  EXPECT_TRUE(absl::StrContains(plaintext.output(),
                                "Socket closed (the server closed the connection at once: it "
                                "may speak TLS only; pass --tls_ca_file"))
      << plaintext.output();
  Child no_certificate({GEMM_CLI_BINARY, "info", target,
                        absl::StrCat("--tls_ca_file=", dir, "/ca.pem"), "--timeout_s=5"});
  EXPECT_EQ(WEXITSTATUS(no_certificate.Wait(absl::Seconds(30))), 1);
  EXPECT_TRUE(absl::StrContains(no_certificate.output(),
                                "it may want a client certificate, --tls_cert_file and "
                                "--tls_key_file"))
      << no_certificate.output();
  setenv("GEMMD_TOKEN", "alice-0123456789abcdef", 1);
  Child token({GEMM_CLI_BINARY, "health", target, "--timeout_s=5"});
  unsetenv("GEMMD_TOKEN");
  token.Wait(absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(token.output(), "warning: sending the bearer token to 127.0.0.1:"))
      << token.output();
  EXPECT_TRUE(absl::StrContains(token.output(), "without TLS")) << token.output();
}

}  // namespace
}  // namespace gemmd
