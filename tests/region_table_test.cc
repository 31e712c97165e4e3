// The shared-memory regions layer: registering (names, keys confined to the prefix and
// the tenant, caps, bounds), tenants kept apart, and a region truncated under the
// server: reads of it finish (zeros), the region says it was truncated, and the process
// lives; a SIGBUS outside every region still ends the process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/regions/region_table.h"

namespace gemmd {
namespace {

// A shared-memory object of this test process, removed when it goes.
class ShmObject {
 public:
  ShmObject(const std::string& suffix, int64_t bytes)
      : key_(absl::StrCat("/gemmdtest-", getpid(), "-", suffix)) {
    shm_unlink(key_.c_str());
    const int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0) << key_;
    EXPECT_EQ(ftruncate(fd, bytes), 0);
    close(fd);
  }
  ~ShmObject() { shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }
  void Truncate(int64_t bytes) const {
    const int fd = shm_open(key_.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, bytes), 0);
    close(fd);
  }

 private:
  std::string key_;
};

RegionSettings Settings() {
  RegionSettings s;
  s.prefix = "gemmdtest-";
  s.max_bytes = 1 << 20;
  s.max_regions = 3;
  return s;
}

TEST(RegionTableTest, RegistersFindsListsAndUnregistersPerTenant) {
  ShmObject object("a", 65536);
  RegionTable table(Settings());
  absl::StatusOr<std::shared_ptr<SharedRegion>> region =
      table.Register("", "mine", object.key(), 4096, 8192);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->bytes(), 8192);
  EXPECT_EQ((*region)->offset(), 4096);
  EXPECT_FALSE((*region)->page_locked());
  EXPECT_EQ(table.bytes(), 8192);
  // Written through one mapping, seen through the object.
  std::memcpy((*region)->data(), "gemmd", 5);
  const int fd = shm_open(object.key().c_str(), O_RDONLY, 0);
  char seen[5] = {};
  ASSERT_EQ(pread(fd, seen, 5, 4096), 5);
  close(fd);
  EXPECT_EQ(std::string(seen, 5), "gemmd");

  ASSERT_TRUE(table.Find("", "mine").ok());
  EXPECT_EQ(table.List("").size(), 1u);
  // Another tenant sees nothing of it.
  EXPECT_EQ(table.Find("bob", "mine").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table.List("bob").empty());
  EXPECT_EQ(table.Unregister("bob", "mine").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.Register("", "mine", object.key(), 0, 0).status().code(),
            absl::StatusCode::kAlreadyExists);

  ASSERT_TRUE(table.Unregister("", "mine").ok());
  EXPECT_EQ(table.bytes(), 0);
  EXPECT_EQ(table.Find("", "mine").status().code(), absl::StatusCode::kNotFound);
  // A holder (a call) still reads it, and learns it was unregistered.
  EXPECT_EQ(std::string((*region)->data(), 5), "gemmd");
  EXPECT_EQ((*region)->CheckIntact().code(), absl::StatusCode::kAborted);
}

TEST(RegionTableTest, KeysAreConfinedToThePrefixAndTheTenant) {
  RegionTable table(Settings());
  struct Case {
    std::string tenant, key;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"", "/other-x", absl::StatusCode::kPermissionDenied, "start with \"/gemmdtest-\""},
      {"", "/gemmdtest-", absl::StatusCode::kPermissionDenied, "outside"},
      {"", "gemmdtest-x", absl::StatusCode::kInvalidArgument, "must be '/'"},
      {"", "/gemmdtest-../x", absl::StatusCode::kInvalidArgument, "[A-Za-z0-9._@-]"},
      {"alice", "/gemmdtest-x", absl::StatusCode::kPermissionDenied, "/gemmdtest-alice@"},
      // Tenant "al" cannot reach tenant "alice"'s names: '@' ends a tenant's part.
      {"al", "/gemmdtest-alice@x", absl::StatusCode::kPermissionDenied, "/gemmdtest-al@"},
      {"", "/gemmdtest-missing", absl::StatusCode::kNotFound, "no shared-memory object"},
  };
  for (const Case& c : cases) {
    const absl::Status s = table.Register(c.tenant, "r", c.key, 0, 0).status();
    EXPECT_EQ(s.code(), c.code) << c.key << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.message)) << c.key << ": " << s;
  }
  EXPECT_EQ(table.Register("", "bad name", "/gemmdtest-x", 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A tenant's own name under the prefix is fine.
  ShmObject alices(absl::StrCat("alice@", getpid()), 4096);
  RegionSettings s = Settings();
  s.prefix = absl::StrCat("gemmdtest-", getpid(), "-");
  RegionTable tenants(s);
  EXPECT_TRUE(tenants.Register("alice", "r", alices.key(), 0, 0).ok());
  EXPECT_EQ(tenants.Register("bob", "r", alices.key(), 0, 0).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(RegionTableTest, RangesAndCapsAreChecked) {
  ShmObject object("caps", 1 << 20);
  RegionTable table(Settings());  // 1 MiB, 3 regions a tenant
  EXPECT_EQ(table.Register("", "r", object.key(), (1 << 20) - 10, 20).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(table.Register("", "r", object.key(), (1 << 20) + 1, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(table.Register("", "r", object.key(), 1 << 20, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // empty
  EXPECT_EQ(table.Register("", "r", object.key(), -1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.Register("", "half", object.key(), 0, 1 << 19).ok());
  const absl::Status over = table.Register("", "more", object.key(), 0, (1 << 19) + 1).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_TRUE(absl::StrContains(over.message(), "--shm_max_bytes")) << over;
  ASSERT_TRUE(table.Register("", "b", object.key(), 0, 4096).ok());
  ASSERT_TRUE(table.Register("", "c", object.key(), 0, 4096).ok());
  const absl::Status many = table.Register("", "d", object.key(), 0, 4096).status();
  EXPECT_EQ(many.code(), absl::StatusCode::kResourceExhausted) << many;
  EXPECT_TRUE(absl::StrContains(many.message(), "--shm_max_regions")) << many;

  absl::StatusOr<std::shared_ptr<SharedRegion>> region = table.Find("", "b");
  ASSERT_TRUE(region.ok());
  EXPECT_TRUE((*region)->Slice("a", 0, 4096).ok());
  EXPECT_EQ((*region)->Slice("a", 1, 4096).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*region)->Slice("a", -1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  table.Clear();
  EXPECT_EQ(table.bytes(), 0);
  EXPECT_EQ((*region)->CheckIntact().code(), absl::StatusCode::kAborted);
}

TEST(RegionTableTest, PinsWhatFitsTheCapAndNothingElse) {
  ShmObject object("pin", 2 << 20);
  RegionSettings s = Settings();  // 1 MiB cap
  int pinned = 0, unpinned = 0;
  s.pinning.pin = [&](void*, size_t) {
    ++pinned;
    return true;
  };
  s.pinning.unpin = [&](void*) { ++unpinned; };
  {
    RegionTable table(s);
    // Over the cap: refused before anything is mapped or page-locked.
    EXPECT_EQ(table.Register("", "big", object.key(), 0, 0).status().code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(pinned, 0);
    absl::StatusOr<std::shared_ptr<SharedRegion>> region =
        table.Register("", "small", object.key(), 0, 4096);
    ASSERT_TRUE(region.ok());
    EXPECT_TRUE((*region)->page_locked());
    EXPECT_EQ(pinned, 1);
    ASSERT_TRUE(table.Unregister("", "small").ok());
    EXPECT_EQ(unpinned, 0);  // a holder keeps it mapped and page-locked
  }
  EXPECT_EQ(unpinned, 1);  // the last holder gone: unpinned and unmapped
}

TEST(RegionTableTest, OffRefusesEverything) {
  RegionSettings s = Settings();
  s.prefix.clear();
  RegionTable table(s);
  EXPECT_FALSE(table.enabled());
  EXPECT_EQ(table.Register("", "r", "/gemmdtest-x", 0, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table.Find("", "r").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RegionTableTest, ATruncatedRegionReadsZerosAndSaysSoWithoutKillingTheProcess) {
  ShmObject object("trunc", 4 * 4096);
  RegionTable table(Settings());
  absl::StatusOr<std::shared_ptr<SharedRegion>> region =
      table.Register("", "t", object.key(), 0, 0);
  ASSERT_TRUE(region.ok()) << region.status();
  char* data = (*region)->data();
  std::memset(data, 7, 4 * 4096);
  ASSERT_TRUE((*region)->CheckIntact().ok());
  object.Truncate(4096);
  // Seen at once by its size...
  EXPECT_EQ((*region)->CheckIntact().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*region)->Slice("a", 0, 16).status().code(), absl::StatusCode::kFailedPrecondition);
  // ...and a read past the new end, which would be SIGBUS, reads zeros and writes land.
  volatile char* past = data + 2 * 4096 + 5;
  EXPECT_EQ(*past, 0);
  *past = 9;
  EXPECT_EQ(*past, 9);
  EXPECT_EQ(data[0], 7);  // the first page is still the object's
  // Whole again, it is still refused: its contents here are no longer the object's.
  object.Truncate(4 * 4096);
  const absl::Status s = (*region)->CheckIntact();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated while a call used it")) << s;
}

TEST(RegionTableDeathTest, ASigbusOutsideEveryRegionStillEndsTheProcess) {
  ShmObject object("death", 4096);
  RegionTable table(Settings());
  ASSERT_TRUE(table.Register("", "guarded", object.key(), 0, 0).ok());  // the guard is in
  EXPECT_DEATH(
      {
        const int fd = shm_open(object.key().c_str(), O_RDWR, 0);
        char* other = static_cast<char*>(
            mmap(nullptr, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        volatile char* past = other + 4096;  // beyond the object: SIGBUS, not ours
        *past = 1;
      },
      "");
}

}  // namespace
}  // namespace gemmd
