// A Device and a KernelCatalogue for tests. The device records the launches it runs, can
// hold every run until the test opens a gate, can fail (and then turn unhealthy, like a
// CUDA fault), and writes a recognisable value into each item's C so tests can check
// that results reach the right caller: the problem's m, or with set_tag_from_a(true) the
// first float of the item's A. The catalogue chooses "fake_kernel" for every Matmul
// (unless told to choose "fake_tall_kernel", or nothing, from some M on), and sends
// every QuantizedMatmul down the host path.
#ifndef GEMMD_TESTS_FAKE_DEVICE_H_
#define GEMMD_TESTS_FAKE_DEVICE_H_

#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/devices/backend.h"
#include "server/devices/device.h"
#include "server/devices/kernel_catalogue.h"

namespace gemmd::testing {

class FakeKernel : public Kernel {
 public:
  explicit FakeKernel(std::string_view name = "fake_kernel") : name_(name) {}
  std::string_view name() const override { return name_; }
  KernelInput input() const override { return KernelInput::kDense; }
  Precision precision() const override { return Precision::kFp32; }
  int min_compute_capability() const override { return 0; }

 private:
  const std::string_view name_;
};

inline const FakeKernel& TheFakeKernel() {
  static const FakeKernel kernel;
  return kernel;
}
// What the catalogue chooses for tall problems (set_tall_rows).
inline const FakeKernel& TheTallKernel() {
  static const FakeKernel kernel("fake_tall_kernel");
  return kernel;
}

class FakeCatalogue : public KernelCatalogue {
 public:
  std::vector<KernelDescription> Kernels() const override {
    return {{"fake_kernel", KernelInput::kDense, Precision::kFp32, ""},
            {"fake_tall_kernel", KernelInput::kDense, Precision::kFp32, ""}};
  }
  absl::StatusOr<const Kernel*> Select(const GemmProblem& problem,
                                       std::string_view forced) const override {
    if (problem.m >= refuse_rows_) {
      return absl::FailedPreconditionError("no fake kernel for that many rows");
    }
    if (forced == "fake_tall_kernel" || (forced.empty() && problem.m >= tall_rows_)) {
      return &TheTallKernel();
    }
    return &TheFakeKernel();
  }
  // Problems of at least `rows` rows get fake_tall_kernel.
  void set_tall_rows(int64_t rows) { tall_rows_ = rows; }
  // Problems of at least `rows` rows get no kernel (FAILED_PRECONDITION).
  void set_refuse_rows(int64_t rows) { refuse_rows_ = rows; }
  absl::StatusOr<QuantizedChoice> SelectQuantized(const QuantizedOperands&,
                                                  std::string_view) const override {
    return QuantizedChoice();
  }

 private:
  int64_t tall_rows_ = std::numeric_limits<int64_t>::max();
  int64_t refuse_rows_ = std::numeric_limits<int64_t>::max();
};

class FakeDevice : public Device {
 public:
  explicit FakeDevice(bool gated = false, int lanes = 1, int index = 0) : lanes_(lanes) {
    description_.index = index;
    description_.kind = "fake";
    description_.name = "fake:" + std::to_string(index);
    if (!gated) gate_.Notify();
  }

  const DeviceDescription& description() const override { return description_; }
  int lanes() const override { return lanes_; }
  int64_t max_batch_bytes() const override { return max_batch_bytes_; }

  absl::Status Run(const DeviceLaunch& launch, int, LaunchTimes* times) override {
    {
      absl::MutexLock lock(&mu_);
      ++started_;
      batch_sizes_.push_back(static_cast<int>(launch.items.size()));
      kernels_.push_back(launch.kernel != nullptr ? std::string(launch.kernel->name()) : "");
      packed_batch_.push_back(launch.problem.batch);
      for (const LaunchItem& item : launch.items) {
        ran_m_.push_back(item.problem.m);
        if (item.cancelled != nullptr) held_.push_back(*item.cancelled);
      }
    }
    gate_.WaitForNotification();
    {
      absl::MutexLock lock(&mu_);
      if (!status_.ok()) {
        healthy_ = !fault_;
        return status_;
      }
    }
    for (const LaunchItem& item : launch.items) {
      const GemmProblem& p = item.problem;
      float value = static_cast<float>(p.m);
      if (tag_from_a_) std::memcpy(&value, item.host.a, sizeof(float));
      float* c = static_cast<float*>(item.host.c_out);
      for (int64_t i = 0; i < p.batch * p.m * p.n; ++i) c[i] = value;
    }
    times->compute = absl::Milliseconds(1);
    return absl::OkStatus();
  }
  bool healthy() const override {
    absl::MutexLock lock(&mu_);
    return healthy_;
  }

  // Resident memory is host memory (Device's), counted; frees can be made to fail as a
  // munmap does at vm.max_map_count.
  absl::StatusOr<void*> AllocateResident(int64_t bytes) override {
    absl::StatusOr<void*> memory = Device::AllocateResident(bytes);
    absl::MutexLock lock(&mu_);
    if (memory.ok()) ++resident_allocations_;
    return memory;
  }
  absl::Status FreeResident(void* memory, int64_t bytes) override {
    {
      absl::MutexLock lock(&mu_);
      if (fail_frees_) return absl::InternalError("munmap: Cannot allocate memory (injected)");
      --resident_allocations_;
    }
    return Device::FreeResident(memory, bytes);
  }
  int resident_allocations() {
    absl::MutexLock lock(&mu_);
    return resident_allocations_;
  }
  void set_fail_frees(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_frees_ = fail;
  }
  // Relayouts (Device's, in host memory) fail with `status` while it is not OK.
  absl::Status RelayoutResident(QuantFormat format, int64_t rows, int64_t k, void* data,
                                void* scales, WeightLayout layout) override {
    {
      absl::MutexLock lock(&mu_);
      if (!relayout_status_.ok()) return relayout_status_;
    }
    return Device::RelayoutResident(format, rows, k, data, scales, layout);
  }
  void FailRelayouts(absl::Status status) {
    absl::MutexLock lock(&mu_);
    relayout_status_ = std::move(status);
  }

  void Open() { gate_.Notify(); }
  // Every later run fails with `status`; with `fault`, the device also turns unhealthy.
  void FailWith(absl::Status status, bool fault = false) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(status);
    fault_ = fault;
  }
  void set_max_batch_bytes(int64_t bytes) { max_batch_bytes_ = bytes; }
  void set_tag_from_a(bool on) { tag_from_a_ = on; }
  int started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  std::vector<int64_t> ran_m() {
    absl::MutexLock lock(&mu_);
    return ran_m_;
  }
  std::vector<int> batch_sizes() {
    absl::MutexLock lock(&mu_);
    return batch_sizes_;
  }
  // The kernel of each launch, in order.
  std::vector<std::string> kernels() {
    absl::MutexLock lock(&mu_);
    return kernels_;
  }
  std::vector<int64_t> packed_batch() {
    absl::MutexLock lock(&mu_);
    return packed_batch_;
  }
  // How many items held at the gate so far have been given up by their callers.
  int HeldJobsCancelled() {
    absl::MutexLock lock(&mu_);
    int cancelled = 0;
    if (!gate_.HasBeenNotified()) {
      for (const auto& is_cancelled : held_) cancelled += is_cancelled() ? 1 : 0;
    }
    return cancelled;
  }
  // Blocks until `n` runs have begun (the device holds them at the gate).
  void AwaitStarted(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ >= n; };
    mu_.Await(absl::Condition(&reached));
  }

 private:
  DeviceDescription description_;
  const int lanes_;
  int64_t max_batch_bytes_ = int64_t{1} << 62;
  bool tag_from_a_ = false;
  absl::Notification gate_;
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool fault_ ABSL_GUARDED_BY(mu_) = false;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int resident_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_frees_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status relayout_status_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> ran_m_ ABSL_GUARDED_BY(mu_);
  std::vector<int> batch_sizes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> kernels_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> packed_batch_ ABSL_GUARDED_BY(mu_);
  // The cancellation checks of the items that reached the gate (valid until it opens).
  std::vector<std::function<bool()>> held_ ABSL_GUARDED_BY(mu_);
};

// A backend of fake devices with the fake catalogue.
inline Backend FakeBackend(std::vector<std::unique_ptr<Device>> devices) {
  Backend backend;
  backend.name = "cpu";
  backend.catalogue = std::make_unique<FakeCatalogue>();
  backend.devices = std::move(devices);
  return backend;
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_FAKE_DEVICE_H_
