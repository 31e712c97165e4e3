// The tensor store on its own (server/store): admission against the cap, uploads that
// finish or do not, parts, pins that outlive a delete, TTL expiry on a stepped clock,
// handles, and the scale checks of uploaded chunks.
#include "server/store/tensor_store.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "kernels/quant_prepack.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "tests/fake_device.h"
#include "tests/metrics_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::FakeDevice;
using ::gemmd::testing::MetricValue;

class StepClock : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

TensorSpec Dense(std::vector<int64_t> shape, DataType type = DataType::kFloat32) {
  TensorSpec spec;
  spec.shape = std::move(shape);
  spec.dtype = type;
  return spec;
}

TensorSpec Quantized(int64_t rows, int64_t k, QuantFormat format) {
  TensorSpec spec;
  spec.shape = {rows, k};
  spec.quantized = true;
  spec.format = format;
  spec.tensor_scale = 0.5f;
  return spec;
}

class TensorStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogEnabled(false); }
  void TearDown() override { SetLogEnabled(true); }

  std::unique_ptr<TensorStore> MakeStore(int64_t cap, TensorStoreOptions options = {}) {
    options.cap_bytes = cap;
    options.sweep_interval = absl::Hours(1);  // the tests sweep by hand
    return std::make_unique<TensorStore>(options, std::vector<Device*>{&device_}, &metrics_,
                                         &clock_);
  }

  // Uploads `bytes` as one dense tensor of `spec`.
  absl::StatusOr<std::string> Put(TensorStore& store, const TensorSpec& spec,
                                  const std::string& bytes, absl::Duration ttl = {}) {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload = store.Begin(spec, ttl, "t");
    if (!upload.ok()) return upload.status();
    if (absl::Status s = (*upload)->Append(bytes, {}); !s.ok()) return s;
    return (*upload)->Finish();
  }

  FakeDevice device_;
  ServerMetrics metrics_{1};
  StepClock clock_;
};

std::string Floats(int64_t n, float first) {
  std::string bytes(static_cast<size_t>(n) * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = first + static_cast<float>(i);
    std::memcpy(&bytes[static_cast<size_t>(i) * 4], &v, 4);
  }
  return bytes;
}

TEST_F(TensorStoreTest, StoresAndPinsATensorWithItsBytes) {
  auto store = MakeStore(1 << 20);
  const std::string bytes = Floats(6, 1.0f);
  absl::StatusOr<std::string> handle = Put(*store, Dense({2, 3}), bytes);
  ASSERT_TRUE(handle.ok()) << handle.status();
  // "t1-" + 16 hex digits of instance + "-" + 32 hex digits (128 random bits).
  EXPECT_EQ(handle->size(), 3u + 16 + 1 + 32);
  EXPECT_TRUE(absl::StartsWith(*handle, "t1-" + store->instance() + "-"));
  absl::StatusOr<TensorPin> pin = store->Acquire(*handle);
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_EQ(std::string((*pin)->data(), 24), bytes);
  // Counted at what it takes: a page of host memory and its record.
  EXPECT_EQ(store->used_bytes(), 4096 + kTensorRecordBytes);
  EXPECT_EQ(store->ChargeFor(24, 0), 4096 + kTensorRecordBytes);
  EXPECT_EQ(store->tensor_count(), 1);
  ASSERT_EQ(store->List().size(), 1u);
  EXPECT_EQ(store->List()[0].label, "t");
  // Two uploads never share a handle.
  absl::StatusOr<std::string> other = Put(*store, Dense({2, 3}), bytes);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *handle);
}

TEST_F(TensorStoreTest, RefusesWhatDoesNotFitTheCapBeforeTakingMemory) {
  const int64_t one = 4096 + kTensorRecordBytes;  // a 64-byte tensor's charge
  auto store = MakeStore(one + 100);
  ASSERT_TRUE(Put(*store, Dense({4, 4}), Floats(16, 0)).ok());
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> big = store->Begin(Dense({4, 4}), {}, "");
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      absl::StrContains(big.status().message(),
                        absl::StrCat("needs ", one, " bytes and 100 of ", one + 100, " are free")))
      << big.status();
  EXPECT_EQ(store->used_bytes(), one);
  EXPECT_EQ(device_.resident_allocations(), 1);  // the refused one took no memory
  // More than the whole cap says so, not "full".
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> huge =
      store->Begin(Dense({1024, 1024}), {}, "");
  EXPECT_EQ(huge.status().message(),
            absl::StrCat("this tensor needs ", 4 * 1024 * 1024 + kTensorRecordBytes,
                         " bytes of the tensor store, more than its whole cap of ", one + 100,
                         " (--tensor_store_bytes)"));
}

TEST_F(TensorStoreTest, AnUnfinishedUploadLeavesNothing) {
  auto store = MakeStore(1 << 20);
  {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
        store->Begin(Dense({8, 8}), {}, "");
    ASSERT_TRUE(upload.ok());
    ASSERT_TRUE((*upload)->Append(Floats(10, 0), {}).ok());
    EXPECT_EQ(store->used_bytes(), store->ChargeFor(256, 0));  // counted while it uploads
    absl::StatusOr<std::string> short_of = (*upload)->Finish();
    EXPECT_EQ(short_of.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(short_of.status().message(),
                                  "after 40 data bytes; FLOAT32 [8, 8] needs 256"))
        << short_of.status();
  }
  EXPECT_EQ(store->used_bytes(), 0);
  EXPECT_TRUE(store->List().empty());
}

TEST_F(TensorStoreTest, RefusesBytesPastTheEnd) {
  auto store = MakeStore(1 << 20);
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload = store->Begin(Dense({2, 2}), {}, "");
  ASSERT_TRUE(upload.ok());
  const absl::Status s = (*upload)->Append(Floats(5, 0), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "20 bytes sent; FLOAT32 [2, 2] has 16")) << s;
  // A dense tensor takes no scales.
  EXPECT_EQ((*upload)->Append({}, "x").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TensorStoreTest, DeleteTakesEffectWhenTheLastPinGoes) {
  auto store = MakeStore(1 << 20);
  absl::StatusOr<std::string> handle = Put(*store, Dense({2, 2}), Floats(4, 3));
  ASSERT_TRUE(handle.ok());
  absl::StatusOr<TensorPin> pin = store->Acquire(*handle);
  ASSERT_TRUE(pin.ok());
  ASSERT_TRUE(store->Delete(*handle).ok());
  // Gone for new users at once...
  EXPECT_EQ(store->Acquire(*handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Delete(*handle).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->List().empty());
  // ...while the job that holds it still reads its bytes.
  EXPECT_EQ(store->used_bytes(), store->ChargeFor(16, 0));
  EXPECT_EQ(std::string((*pin)->data(), 16), Floats(4, 3));
  pin->reset();
  EXPECT_EQ(store->used_bytes(), 0);
}

TEST_F(TensorStoreTest, ExpiresAfterItsTtl) {
  auto store = MakeStore(1 << 20);
  absl::StatusOr<std::string> handle =
      Put(*store, Dense({2, 2}), Floats(4, 0), absl::Seconds(10));
  ASSERT_TRUE(handle.ok());
  absl::StatusOr<std::string> forever = Put(*store, Dense({2, 2}), Floats(4, 0));
  ASSERT_TRUE(forever.ok());
  clock_.Advance(absl::Seconds(9));
  store->Sweep();
  EXPECT_TRUE(store->Acquire(*handle).ok());
  clock_.Advance(absl::Seconds(2));
  // Expired before the sweeper came by: already unknown.
  EXPECT_EQ(store->Acquire(*handle).status().code(), absl::StatusCode::kNotFound);
  store->Sweep();
  EXPECT_EQ(store->List().size(), 1u);
  EXPECT_EQ(store->used_bytes(), store->ChargeFor(16, 0));
  EXPECT_TRUE(store->Acquire(*forever).ok());
  EXPECT_EQ(store->Begin(Dense({1, 1}), absl::Seconds(-1), "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TensorStoreTest, TemporariesAreKnownPerTenantUntilTheyGoOrExpire) {
  auto store = MakeStore(1 << 20);
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
      store->Begin(Dense({2, 2}), absl::Seconds(10), "t", "alice", "", /*temporary=*/true);
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append(Floats(4, 0), {}).ok());
  absl::StatusOr<std::string> temporary = (*upload)->Finish();
  ASSERT_TRUE(temporary.ok());
  absl::StatusOr<std::string> opened = store->OpenParts(Dense({4, 2}), absl::Seconds(10), "p", 2,
                                                        "alice", "", /*temporary=*/true);
  ASSERT_TRUE(opened.ok());
  absl::StatusOr<std::string> plain = Put(*store, Dense({2, 2}), Floats(4, 0));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(store->IsTemporary(*temporary, "alice"));
  EXPECT_TRUE(store->IsTemporary(*opened, "alice"));  // still uploading its parts
  EXPECT_FALSE(store->IsTemporary(*temporary, "bob"));
  EXPECT_FALSE(store->IsTemporary(*plain, ""));
  EXPECT_FALSE(store->IsTemporary("t1-nobody", "alice"));
  EXPECT_EQ(store->TemporaryCount(), 2);
  ASSERT_TRUE(store->Delete(*opened, "alice").ok());
  EXPECT_EQ(store->TemporaryCount(), 1);
  clock_.Advance(absl::Seconds(11));  // expired, before any sweep
  EXPECT_FALSE(store->IsTemporary(*temporary, "alice"));
  EXPECT_EQ(store->TemporaryCount(), 0);
}

TEST_F(TensorStoreTest, AGoneTemporarysMemoryServesTheNextOfItsSizeThenGoes) {
  auto store = MakeStore(1 << 20);
  const TensorSpec spec = Dense({64, 64});  // 16 KiB
  const int64_t charge = store->ChargeFor(64 * 64 * 4, 0);
  auto put_temporary = [&](const TensorSpec& s) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
        store->Begin(s, absl::Seconds(30), "t", "alice", "", /*temporary=*/true);
    if (!upload.ok()) return upload.status();
    if (absl::Status st = (*upload)->Append(Floats(s.shape[0] * s.shape[1], 0), {}); !st.ok()) return st;
    return (*upload)->Finish();
  };
  absl::StatusOr<std::string> first = put_temporary(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  const void* memory = (*store->Acquire(*first, "alice"))->memory;
  ASSERT_TRUE(store->Delete(*first, "alice").ok());
  // Gone as a tensor at once; its memory stays, still counted against the cap.
  EXPECT_EQ(store->tensor_count(), 0);
  EXPECT_EQ(store->used_bytes(), charge);
  EXPECT_EQ(device_.resident_allocations(), 1);
  // The next temporary of its size on its device takes it: no new allocation.
  absl::StatusOr<std::string> second = put_temporary(spec);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*store->Acquire(*second, "alice"))->memory, memory);
  EXPECT_EQ(device_.resident_allocations(), 1);
  EXPECT_EQ(store->used_bytes(), charge);
  // Another size, or a tensor that is no temporary, allocates its own.
  absl::StatusOr<std::string> other = put_temporary(Dense({32, 64}));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(device_.resident_allocations(), 2);
  ASSERT_TRUE(store->Delete(*second, "alice").ok());
  ASSERT_TRUE(store->Delete(*other, "alice").ok());
  absl::StatusOr<std::string> plain = Put(*store, spec, Floats(64 * 64, 1));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(device_.resident_allocations(), 3);
  ASSERT_TRUE(store->Delete(*plain).ok());
  EXPECT_EQ(device_.resident_allocations(), 2);  // freed at once
  // The spares go with the first sweep two seconds after they came.
  store->Sweep();
  EXPECT_EQ(device_.resident_allocations(), 2);
  clock_.Advance(absl::Seconds(3));
  store->Sweep();
  EXPECT_EQ(device_.resident_allocations(), 0);
  EXPECT_EQ(store->used_bytes(), 0);
}

TEST_F(TensorStoreTest, SparesGiveWayToATensorTheCapHasNoRoomFor) {
  const int64_t charge = MakeStore(1)->ChargeFor(256 * 256 * 4, 0);
  auto store = MakeStore(charge + charge / 2);
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
      store->Begin(Dense({256, 256}), absl::Seconds(30), "t", "", "", /*temporary=*/true);
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append(Floats(256 * 256, 0), {}).ok());
  absl::StatusOr<std::string> temporary = (*upload)->Finish();
  ASSERT_TRUE(temporary.ok());
  upload->reset();  // the upload's hold on the tensor
  ASSERT_TRUE(store->Delete(*temporary).ok());
  EXPECT_EQ(store->tensor_count(), 0);
  EXPECT_EQ(store->used_bytes(), charge);  // the spare
  // A tensor of another size finds the cap full of the spare: the spare goes instead.
  absl::StatusOr<std::string> plain = Put(*store, Dense({250, 256}), Floats(250 * 256, 1));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(device_.resident_allocations(), 1);
  EXPECT_EQ(store->used_bytes(), store->ChargeFor(250 * 256 * 4, 0));
  // Or freed on demand.
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> again =
      store->Begin(Dense({8, 8}), absl::Seconds(30), "t", "", "", /*temporary=*/true);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Append(Floats(64, 0), {}).ok());
  absl::StatusOr<std::string> small = (*again)->Finish();
  ASSERT_TRUE(small.ok());
  again->reset();
  ASSERT_TRUE(store->Delete(*small).ok());
  EXPECT_EQ(device_.resident_allocations(), 2);
  store->ReleaseSpares();
  EXPECT_EQ(device_.resident_allocations(), 1);
  EXPECT_EQ(store->used_bytes(), store->ChargeFor(250 * 256 * 4, 0));
}

TEST_F(TensorStoreTest, PartsMakeOneTensorOnlyWhenAllArrived) {
  auto store = MakeStore(1 << 20);
  const TensorSpec spec = Dense({5, 2});  // rows 0-1 and 2-4 in two parts
  absl::StatusOr<std::string> handle = store->OpenParts(spec, {}, "parts", 2);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(store->Acquire(*handle).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> second = store->BeginPart(*handle, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(store->BeginPart(*handle, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->BeginPart(*handle, 2).status().code(), absl::StatusCode::kInvalidArgument);
  const std::string all = Floats(10, 0);
  ASSERT_TRUE((*second)->Append(all.substr(16), {}).ok());
  ASSERT_TRUE((*second)->Finish().ok());
  EXPECT_FALSE(store->Acquire(*handle).ok());
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> first = store->BeginPart(*handle, 0);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Append(all.substr(0, 16), {}).ok());
  ASSERT_TRUE((*first)->Finish().ok());
  absl::StatusOr<TensorPin> pin = store->Acquire(*handle);
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_EQ(std::string((*pin)->data(), 40), all);
  EXPECT_EQ(store->OpenParts(spec, {}, "", 6).status().code(),
            absl::StatusCode::kInvalidArgument);  // more parts than rows
}

TEST_F(TensorStoreTest, AFailedPartTakesTheWholeTensorOut) {
  auto store = MakeStore(1 << 20);
  absl::StatusOr<std::string> handle = store->OpenParts(Dense({4, 4}), {}, "", 2);
  ASSERT_TRUE(handle.ok());
  {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> part = store->BeginPart(*handle, 0);
    ASSERT_TRUE(part.ok());
    ASSERT_TRUE((*part)->Append(Floats(3, 0), {}).ok());
  }  // abandoned
  EXPECT_EQ(store->BeginPart(*handle, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->used_bytes(), 0);
  EXPECT_TRUE(store->List().empty());
}

// An opened tensor holds its room while no part uploads only for part_upload_timeout
// (counted from the open, and from each part's start or end); a part in progress is the
// stream's to time out (the service's idle watch), not the sweep's.
TEST_F(TensorStoreTest, AnOpenTensorWithNoPartUploadingIsDroppedAfterTheTimeout) {
  auto store = MakeStore(1 << 20);  // part_upload_timeout: 10 s by default
  absl::StatusOr<std::string> handle = store->OpenParts(Dense({4, 4}), {}, "", 2);
  ASSERT_TRUE(handle.ok());
  clock_.Advance(absl::Seconds(9));
  store->Sweep();
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> part = store->BeginPart(*handle, 0);
  ASSERT_TRUE(part.ok()) << part.status();
  clock_.Advance(absl::Minutes(5));  // a slow part: still uploading
  store->Sweep();
  ASSERT_TRUE((*part)->Append(Floats(8, 0), {}).ok());
  ASSERT_TRUE((*part)->Finish().ok());
  part->reset();  // its stream ends
  clock_.Advance(absl::Seconds(9));
  store->Sweep();
  EXPECT_EQ(store->Acquire(*handle).status().code(), absl::StatusCode::kFailedPrecondition);
  clock_.Advance(absl::Seconds(2));  // 11 s since the part finished, none since
  store->Sweep();
  EXPECT_EQ(store->used_bytes(), 0);
  EXPECT_EQ(store->Acquire(*handle).status().code(), absl::StatusCode::kNotFound);
  // A header alone (parts never started) goes after 10 s too.
  absl::StatusOr<std::string> idle = store->OpenParts(Dense({4, 4}), {}, "", 2);
  ASSERT_TRUE(idle.ok());
  clock_.Advance(absl::Seconds(10));
  store->Sweep();
  EXPECT_EQ(store->used_bytes(), 0);
  EXPECT_EQ(store->tensor_count(), 0);
}

// 30 000 [1,1] tensors under a 1 MiB cap once took 190 MB: each was counted at its 4
// bytes. Now each counts its page and record, and their number is capped as well.
TEST_F(TensorStoreTest, CountsTinyTensorsAtTheirRealCostAndCapsTheirNumber) {
  auto store = MakeStore(1 << 20);
  int stored = 0;
  absl::Status refused;
  for (int i = 0; i < 30000 && refused.ok(); ++i) {
    absl::StatusOr<std::string> h = Put(*store, Dense({1, 1}), Floats(1, 0));
    if (h.ok()) ++stored;
    refused = h.status();
  }
  EXPECT_EQ(stored, (1 << 20) / (4096 + kTensorRecordBytes));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "the tensor store is full")) << refused;
  EXPECT_EQ(device_.resident_allocations(), stored);

  TensorStoreOptions few;
  few.max_tensors = 3;
  auto small = MakeStore(1 << 20, few);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put(*small, Dense({1, 1}), Floats(1, 0)).ok());
  const absl::Status fourth = Put(*small, Dense({1, 1}), Floats(1, 0)).status();
  EXPECT_EQ(fourth.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fourth.message(),
            "the tensor store holds 3 tensors, its most (--tensor_store_max_tensors=3); delete "
            "tensors or let them expire");
}

// Memory the device cannot give back (munmap failing at vm.max_map_count) stays counted:
// the cap keeps saying what is really taken, and the failure is logged.
TEST_F(TensorStoreTest, MemoryThatCannotBeFreedStaysCounted) {
  auto store = MakeStore(1 << 20);
  absl::StatusOr<std::string> handle = Put(*store, Dense({2, 2}), Floats(4, 0));
  ASSERT_TRUE(handle.ok());
  device_.set_fail_frees(true);
  ASSERT_TRUE(store->Delete(*handle).ok());
  EXPECT_EQ(store->used_bytes(), store->ChargeFor(16, 0));
  EXPECT_EQ(store->tensor_count(), 1);
  device_.set_fail_frees(false);
}

// A tenant's uploads in progress (each holding its tensor's room) are capped.
TEST_F(TensorStoreTest, CapsTheUploadsOneTenantHasOpen) {
  TensorStoreOptions options;
  options.max_open_uploads = 2;
  auto store = MakeStore(1 << 20, options);
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> one =
      store->Begin(Dense({2, 2}), {}, "", "a");
  ASSERT_TRUE(one.ok());
  absl::StatusOr<std::string> opened = store->OpenParts(Dense({2, 2}), {}, "", 2, "a");
  ASSERT_TRUE(opened.ok());
  const absl::Status third = store->Begin(Dense({2, 2}), {}, "", "a").status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(),
            "tenant a has 2 uploads open, its most (--max_open_uploads=2); finish or cancel one "
            "first");
  EXPECT_TRUE(store->Begin(Dense({2, 2}), {}, "", "b").ok());  // another tenant's own count
  ASSERT_TRUE((*one)->Append(Floats(4, 0), {}).ok());
  ASSERT_TRUE((*one)->Finish().ok());  // a finished upload gives its place back
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> again =
      store->Begin(Dense({2, 2}), {}, "", "a");
  ASSERT_TRUE(again.ok()) << again.status();
  again->reset();                         // so does an abandoned one
  for (int part = 0; part < 2; ++part) {  // and a tensor whose parts all arrived
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> p = store->BeginPart(*opened, part, "a");
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->Append(Floats(2, 0), {}).ok());
    ASSERT_TRUE((*p)->Finish().ok());
  }
  std::vector<std::unique_ptr<TensorStore::Upload>> open;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> u =
        store->Begin(Dense({2, 2}), {}, "", "a");
    ASSERT_TRUE(u.ok()) << i << ": " << u.status();
    open.push_back(*std::move(u));
  }
}

// A tenant the reloaded tokens file no longer names loses its tensors (nobody can reach
// them); tenant "" (no authentication) and the others keep theirs.
TEST_F(TensorStoreTest, DropsTheTensorsOfTenantsNoLongerKnown) {
  auto store = MakeStore(1 << 20);
  auto put_as = [&](const std::string& tenant) {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> u =
        store->Begin(Dense({1, 1}), {}, "", tenant);
    EXPECT_TRUE(u.ok());
    EXPECT_TRUE((*u)->Append(Floats(1, 0), {}).ok());
    return *(*u)->Finish();
  };
  put_as("a");
  put_as("a");
  const std::string kept = put_as("b");
  put_as("");
  EXPECT_EQ(store->DropTenantsOtherThan({"b"}), 2);
  EXPECT_TRUE(store->List("a").empty());
  EXPECT_TRUE(store->Acquire(kept, "b").ok());
  EXPECT_EQ(store->List("").size(), 1u);
  EXPECT_EQ(store->used_bytes(), 2 * store->ChargeFor(4, 0));
}

TEST_F(TensorStoreTest, HandlesOfAnotherInstanceSaySo) {
  auto store = MakeStore(1 << 20);
  const absl::Status s = store->Acquire("t1-0123456789abcdef-00").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "issued by server instance 0123456789abcdef"))
      << s;
  const absl::Status unknown =
      store->Acquire("t1-" + store->instance() + "-00000000000000000000000000000000").status();
  EXPECT_TRUE(absl::StrContains(unknown.message(), "never stored, deleted, or expired")) << unknown;
}

TEST_F(TensorStoreTest, ChecksScalesAsTheyArrive) {
  auto store = MakeStore(1 << 20);
  // NVFP4 [2, 32]: 32 code bytes, 4 E4M3 scale bytes; 0x7F is NaN.
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> nvfp4 =
      store->Begin(Quantized(2, 32, QuantFormat::kNvfp4), {}, "");
  ASSERT_TRUE(nvfp4.ok()) << nvfp4.status();
  ASSERT_TRUE((*nvfp4)->Append(std::string(32, '\x11'), std::string("\x38\x38", 2)).ok());
  const absl::Status nan = (*nvfp4)->Append({}, std::string("\x38\x7f", 2));
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(nan.message(), "NVFP4 block scale [1, 1] is 0x7f")) << nan;

  // INT8 [2, 4]: two FP32 row scales, the second NaN and split between two chunks.
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> int8 =
      store->Begin(Quantized(2, 4, QuantFormat::kInt8), {}, "");
  ASSERT_TRUE(int8.ok());
  const float scales[2] = {0.5f, std::numeric_limits<float>::quiet_NaN()};
  const std::string bytes(reinterpret_cast<const char*>(scales), 8);
  ASSERT_TRUE((*int8)->Append(std::string(8, '\x01'), bytes.substr(0, 6)).ok());
  const absl::Status bad = (*int8)->Append({}, bytes.substr(6));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "scales[1] is nan")) << bad;
}

// --quantized_layout: the relayout is the upload's last step, before the tensor can be
// pinned; it is observed in its own histogram; a failed one leaves nothing (whole or in
// parts), and auto keeps what the device prefers (the fake: canonical).
TEST_F(TensorStoreTest, QuantizedTensorsAreReLaidOutAsThePolicySays) {
  const int64_t rows = 32, k = 64;
  std::string codes(static_cast<size_t>(rows * k / 2), '\0'), scales(rows * k / 16, '\0');
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<char>(i * 7 + 1);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<char>(0x30 + i % 16);
  std::vector<uint8_t> expected(codes.size() + scales.size());
  ASSERT_TRUE(PrepackNvfp4SwapAb(reinterpret_cast<const uint8_t*>(codes.data()),
                                 reinterpret_cast<const uint8_t*>(scales.data()), rows, k,
                                 expected.data())
                  .ok());
  const TensorSpec spec = Quantized(rows, k, QuantFormat::kNvfp4);
  auto put = [&](TensorStore& store) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload = store.Begin(spec, {}, "w");
    if (!upload.ok()) return upload.status();
    if (absl::Status s = (*upload)->Append(codes, scales); !s.ok()) return s;
    return (*upload)->Finish();
  };
  const auto relayouts = [&] {
    return MetricValue(metrics_, "gemm_tensor_relayout_duration_seconds", {});
  };

  TensorStoreOptions swap_ab;
  swap_ab.quantized_layout = QuantizedLayoutPolicy::kSwapAb;
  auto store = MakeStore(1 << 20, swap_ab);
  absl::StatusOr<std::string> handle = put(*store);
  ASSERT_TRUE(handle.ok()) << handle.status();
  absl::StatusOr<TensorPin> pin = store->Acquire(*handle);
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_EQ((*pin)->layout, WeightLayout::kSwapAb);
  EXPECT_EQ(std::string((*pin)->data(), codes.size()),
            std::string(expected.begin(), expected.begin() + codes.size()));
  EXPECT_EQ(std::string((*pin)->scales(), scales.size()),
            std::string(expected.begin() + codes.size(), expected.end()));
  EXPECT_EQ(relayouts(), 1);
  // A shape without the layout stays as uploaded.
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> odd =
      store->Begin(Quantized(8, 64, QuantFormat::kNvfp4), {}, "");
  ASSERT_TRUE(odd.ok());
  ASSERT_TRUE((*odd)->Append(codes.substr(0, 256), scales.substr(0, 32)).ok());
  absl::StatusOr<std::string> odd_handle = (*odd)->Finish();
  ASSERT_TRUE(odd_handle.ok()) << odd_handle.status();
  EXPECT_EQ((*store->Acquire(*odd_handle))->layout, WeightLayout::kCanonical);
  EXPECT_EQ(relayouts(), 1);

  // A relayout that fails: the upload fails and nothing stays, whole or in parts.
  device_.FailRelayouts(absl::InternalError("injected"));
  const int64_t used = store->used_bytes();
  absl::StatusOr<std::string> failed = put(*store);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(failed.status().message(),
            "re-laying out NVFP4 [32, 64] (swap-ab): injected; nothing was stored");
  absl::StatusOr<std::string> parts = store->OpenParts(spec, {}, "", 2);
  ASSERT_TRUE(parts.ok());
  for (int part = 0; part < 2; ++part) {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> p = store->BeginPart(*parts, part);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE((*p)->Append(codes.substr(part * 512, 512), scales.substr(part * 64, 64)).ok());
    const absl::StatusOr<std::string> done = (*p)->Finish();
    EXPECT_EQ(done.ok(), part == 0) << done.status();  // the last part's relayout fails
  }
  EXPECT_EQ(store->Acquire(*parts).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->used_bytes(), used);
  device_.FailRelayouts(absl::OkStatus());

  // auto: the device's preference (canonical here); canonical: never.
  for (QuantizedLayoutPolicy policy :
       {QuantizedLayoutPolicy::kAuto, QuantizedLayoutPolicy::kCanonical}) {
    TensorStoreOptions options;
    options.quantized_layout = policy;
    auto other = MakeStore(1 << 20, options);
    absl::StatusOr<std::string> h = put(*other);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ((*other->Acquire(*h))->layout, WeightLayout::kCanonical);
    EXPECT_EQ(std::string((*other->Acquire(*h))->data(), codes.size()), codes);
  }
  EXPECT_EQ(relayouts(), 1);
}

TEST(TensorSpecTest, RefusesMalformedSpecsWithWhatIsExpected) {
  EXPECT_TRUE(ValidateSpec(Dense({2, 3})).ok());
  EXPECT_TRUE(ValidateSpec(Dense({4, 2, 3})).ok());
  EXPECT_TRUE(absl::StrContains(ValidateSpec(Dense({6})).message(), "has rank 1"));
  EXPECT_TRUE(absl::StrContains(ValidateSpec(Dense({2, 0})).message(), "dimension < 1"));
  EXPECT_TRUE(
      absl::StrContains(ValidateSpec(Dense({int64_t{1} << 40, int64_t{1} << 40})).message(),
                        "elements"));
  TensorSpec nvfp4 = Quantized(4, 24, QuantFormat::kNvfp4);
  EXPECT_TRUE(absl::StrContains(ValidateSpec(nvfp4).message(), "multiple of 16"));
  nvfp4.shape = {4, 32};
  nvfp4.tensor_scale = 0;
  EXPECT_TRUE(absl::StrContains(ValidateSpec(nvfp4).message(), "finite scale > 0"));
  // Byte counts: NVFP4 [4, 32]: 64 code bytes, 8 scale bytes after 256-byte alignment.
  nvfp4.tensor_scale = 1;
  EXPECT_EQ(DataBytes(nvfp4), 64);
  EXPECT_EQ(ScaleBytes(nvfp4), 8);
  EXPECT_EQ(StoredBytes(nvfp4), 256 + 8);
  EXPECT_EQ(StoredBytes(Dense({3, 5}, DataType::kFloat16)), 30);
}

// The gauges follow the store's memory from the moment an upload takes it, not only once
// it completes (ListTensors' store_bytes counts uploads in progress; the gauge did not).
TEST_F(TensorStoreTest, PublishesItsGaugesWhileUploadsAreInProgressToo) {
  auto store = MakeStore(1 << 20);
  auto gauge = [&](const std::string& name) {
    for (const auto& family : metrics_.registry()->Collect()) {
      if (family.name == name && family.metric.size() == 1) return family.metric[0].gauge.value;
    }
    ADD_FAILURE() << "no " << name;
    return -1.0;
  };
  const double charge = static_cast<double>(store->ChargeFor(16, 0));
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload = store->Begin(Dense({2, 2}), {}, "");
  ASSERT_TRUE(upload.ok());
  EXPECT_EQ(gauge("gemm_tensor_store_bytes"), charge);
  ASSERT_TRUE((*upload)->Append(Floats(4, 0), {}).ok());
  absl::StatusOr<std::string> handle = (*upload)->Finish();
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(gauge("gemm_tensor_store_bytes"), charge);
  EXPECT_EQ(gauge("gemm_tensor_store_tensors"), 1);
  ASSERT_TRUE(store->Delete(*handle).ok());
  upload->reset();
  EXPECT_EQ(gauge("gemm_tensor_store_bytes"), 0);
  EXPECT_EQ(gauge("gemm_tensor_store_tensors"), 0);
}

// Two devices: the store's choice spreads tensors by resident bytes and skips a faulted
// device; header.device places a tensor where it is asked to, parts included, and a name
// of no device or of a faulted one is refused before anything is taken.
TEST_F(TensorStoreTest, PlacesTensorsOnTheNamedOrLeastUsedHealthyDevice) {
  FakeDevice second(false, 1, 1);
  ServerMetrics metrics(2);
  TensorStoreOptions options;
  options.cap_bytes = 1 << 20;
  options.sweep_interval = absl::Hours(1);
  TensorStore store(options, {&device_, &second}, &metrics, &clock_);
  auto device_of = [&](const std::string& handle) {
    absl::StatusOr<TensorPin> pin = store.Acquire(handle);
    EXPECT_TRUE(pin.ok()) << pin.status();
    return pin.ok() ? (*pin)->device->description().name : std::string();
  };
  auto put_on = [&](absl::string_view device, int64_t floats,
                    const std::string& tenant = "") -> absl::StatusOr<std::string> {
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
        store.Begin(Dense({1, floats}), {}, "", tenant, device);
    if (!upload.ok()) return upload.status();
    if (absl::Status s = (*upload)->Append(Floats(floats, 0), {}); !s.ok()) return s;
    return (*upload)->Finish();
  };
  auto device_of_tenant = [&](const std::string& handle, const std::string& tenant) {
    absl::StatusOr<TensorPin> pin = store.Acquire(handle, tenant);
    EXPECT_TRUE(pin.ok()) << pin.status();
    return pin.ok() ? (*pin)->device->description().name : std::string();
  };

  absl::StatusOr<std::string> first = put_on("", 64);  // both empty: the first device
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(device_of(*first), "fake:0");
  // The caller's next tensor goes with its first, so a GEMM of the two finds both on one
  // device (the natural flow: put x, put w, matmul(x, w)).
  absl::StatusOr<std::string> together = put_on("", 16);
  ASSERT_TRUE(together.ok());
  EXPECT_EQ(device_of(*together), "fake:0");
  // Another tenant's first tensor goes where the fewest bytes are, and its second with it.
  absl::StatusOr<std::string> other = put_on("", 16, "b");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(device_of_tenant(*other, "b"), "fake:1");
  absl::StatusOr<std::string> other2 = put_on("", 4096, "b");
  ASSERT_TRUE(other2.ok());
  EXPECT_EQ(device_of_tenant(*other2, "b"), "fake:1");
  absl::StatusOr<std::string> named = put_on("fake:1", 64);  // asked, though fake:1 has more
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(device_of(*named), "fake:1");
  absl::StatusOr<std::string> parts = store.OpenParts(Dense({4, 4}), {}, "", 2, "", "fake:1");
  ASSERT_TRUE(parts.ok()) << parts.status();
  int listed = 0;
  for (const TensorListing& t : store.List()) {
    if (t.handle != *parts) continue;
    ++listed;
    EXPECT_EQ(t.device, "fake:1");
  }
  EXPECT_EQ(listed, 1);

  const int64_t used = store.used_bytes();
  absl::StatusOr<std::string> unknown = put_on("cuda:7", 4);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "header.device \"cuda:7\" is no device of this server; its devices: fake:0, fake:1");
  EXPECT_EQ(put_on("a\nb", 4).status().message(),
            "header.device \"a\\nb\" is no device of this server; its devices: fake:0, fake:1");
  EXPECT_EQ(put_on(std::string(300, 'x'), 4).status().message(),
            "header.device has 300 bytes; expected a device id such as cuda:1");

  // fake:0 faults: the store's choice is fake:1 even with more bytes there, and fake:0
  // by name is UNAVAILABLE.
  device_.FailWith(absl::InternalError("fault"), /*fault=*/true);
  DeviceLaunch launch;
  LaunchTimes times;
  (void)device_.Run(launch, 0, &times);
  ASSERT_FALSE(device_.healthy());
  absl::StatusOr<std::string> refused = put_on("fake:0", 4);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "fake:0 has faulted"))
      << refused.status();
  EXPECT_EQ(store.used_bytes(), used);  // refused before any byte was taken
  absl::StatusOr<std::string> avoided = put_on("", 4);
  ASSERT_TRUE(avoided.ok());
  EXPECT_EQ(device_of(*avoided), "fake:1");

  // Both faulted: nowhere to keep a tensor.
  second.FailWith(absl::InternalError("fault"), /*fault=*/true);
  (void)second.Run(launch, 0, &times);
  EXPECT_EQ(put_on("", 4).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gemmd
