// The server's threads carry their role's name (NameThisThread), so `top -H` and
// /proc/PID/task/*/comm split its CPU by role.
#include "server/observability/thread_name.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/observability/log.h"
#include "tests/server_fixture.h"

namespace gemmd {
namespace {

std::string NameOf(pthread_t thread) {
  char name[16] = {};
  EXPECT_EQ(pthread_getname_np(thread, name, sizeof(name)), 0);
  return name;
}

// This process's threads' names, from /proc.
std::set<std::string> ThreadNames() {
  std::set<std::string> names;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return names;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  closedir(tasks);
  return names;
}

TEST(ThreadNameTest, NamesTheCallingThreadAndCutsAtFifteenBytes) {
  std::string short_name, long_name;
  std::thread([&] {
    NameThisThread("gemmd-test");
    short_name = NameOf(pthread_self());
    NameThisThread("gemmd-a-name-too-long-for-linux");
    long_name = NameOf(pthread_self());
  }).join();
  EXPECT_EQ(short_name, "gemmd-test");
  EXPECT_EQ(long_name, "gemmd-a-name-to");
}

class ServerThreadNamesTest : public ::gemmd::testing::InProcessServerTest {
 protected:
  void SetUp() override { SetLogEnabled(false); }
};

TEST_F(ServerThreadNamesTest, EveryRoleOfARunningServerHasItsName) {
  Start();
  const std::vector<std::string> roles = {"gemmd-cq0",    "gemmd-lane0.0", "gemmd-dispatch",
                                          "gemmd-answer", "gemmd-prepare", "gemmd-sweeper"};
  // A thread names itself when it first runs, which on a loaded machine may be a moment
  // after the server has started.
  std::set<std::string> names;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  auto all_named = [&] {
    names = ThreadNames();
    for (const std::string& role : roles) {
      if (names.count(role) == 0) return false;
    }
    return true;
  };
  while (!all_named() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  for (const std::string& role : roles) EXPECT_EQ(names.count(role), 1u) << role;
}

}  // namespace
}  // namespace gemmd
