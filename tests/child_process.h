// A binary run as a child process by a test, its stdout and stderr collected apart by
// threads (a server logs as it runs and must never block on a full pipe), and the port
// of a gemm-server child. (server_process_test.cc has its own, merged-output variant.)
#ifndef GEMMD_TESTS_CHILD_PROCESS_H_
#define GEMMD_TESTS_CHILD_PROCESS_H_

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace gemmd::testing {

class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv) {
    int out_fds[2], err_fds[2];
    if (pipe(out_fds) != 0 || pipe(err_fds) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, out_fds[0]);
    posix_spawn_file_actions_addclose(&actions, err_fds[0]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(out_fds[1]);
    close(err_fds[1]);
    out_reader_ = Reader(out_fds[0], &stdout_);
    err_reader_ = Reader(err_fds[0], &stderr_);
  }

  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      Wait(absl::Seconds(10));
    }
    if (out_reader_.joinable()) out_reader_.join();
    if (err_reader_.joinable()) err_reader_.join();
  }

  pid_t pid() const { return pid_; }

  std::string out() {
    absl::MutexLock lock(&mu_);
    return stdout_;
  }
  std::string err() {
    absl::MutexLock lock(&mu_);
    return stderr_;
  }

  // Waits until stderr contains `text`; false at `timeout`.
  bool AwaitStderr(const std::string& text, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto found = [this, &text]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return absl::StrContains(stderr_, text);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
  }

  // The exit code (-1 if it is still running after `timeout` or did not exit normally),
  // with both streams read to their end.
  int Wait(absl::Duration timeout) {
    const absl::Time limit = absl::Now() + timeout;
    while (pid_ > 0 && absl::Now() < limit) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        if (out_reader_.joinable()) out_reader_.join();
        if (err_reader_.joinable()) err_reader_.join();
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return -1;
  }

 private:
  std::thread Reader(int fd, std::string* into) {
    return std::thread([this, fd, into] {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
        absl::MutexLock lock(&mu_);
        into->append(buffer, static_cast<size_t>(n));
      }
      close(fd);
    });
  }

  pid_t pid_ = -1;
  bool exited_ = false;
  absl::Mutex mu_;
  std::string stdout_ ABSL_GUARDED_BY(mu_);
  std::string stderr_ ABSL_GUARDED_BY(mu_);
  std::thread out_reader_, err_reader_;
};

// The port of a started gemm-server, from its server_started line
// ("grpc=127.0.0.1:PORT"); -1 when it does not start.
inline int StartedServerPort(ChildProcess& server) {
  if (!server.AwaitStderr("event=server_started", absl::Seconds(30))) return -1;
  const std::string log = server.err();
  const std::string key = "grpc=127.0.0.1:";
  const size_t at = log.find(key);
  if (at == std::string::npos) return -1;
  const size_t begin = at + key.size();
  int port = -1;
  if (!absl::SimpleAtoi(log.substr(begin, log.find(' ', begin) - begin), &port)) return -1;
  return port;
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_CHILD_PROCESS_H_
