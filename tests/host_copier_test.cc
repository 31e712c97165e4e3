#include "server/devices/host_copier.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace gemmd {
namespace {

// Copies of assorted sizes (bytes to megabytes) land exactly, also with several callers
// sharing the helpers at once.
TEST(HostCopierTest, CopiesEveryByteFromConcurrentCallers) {
  HostCopier copier(3);
  constexpr int kCallers = 4;
  std::vector<std::thread> callers;
  std::vector<std::string> failures(kCallers);
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      std::mt19937_64 rng(testing::TestSeed(40 + c));
      for (int round = 0; round < 20; ++round) {
        std::vector<std::string> src, dst;
        std::vector<HostCopier::Task> tasks;
        const int n = 1 + static_cast<int>(rng() % 6);
        for (int i = 0; i < n; ++i) {
          const size_t bytes = rng() % 2 ? rng() % 4096 : rng() % (3 << 20);
          src.push_back(testing::RandomBytes(DataType::kInt8, static_cast<int64_t>(bytes), rng));
          dst.emplace_back(bytes, '\0');
        }
        for (int i = 0; i < n; ++i) tasks.push_back({dst[i].data(), src[i].data(), src[i].size()});
        copier.Copy(tasks);
        if (dst != src) failures[c] = "round " + std::to_string(round);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(failures[c], "") << "caller " << c;
}

TEST(HostCopierTest, WorksWithoutHelpers) {
  HostCopier copier(0);
  std::string src(5 << 20, 'x'), dst(5 << 20, '\0');
  src[12345] = 'y';
  copier.Copy({{dst.data(), src.data(), src.size()}});
  EXPECT_EQ(dst, src);
  copier.Copy({});  // nothing to do
}

}  // namespace
}  // namespace gemmd
