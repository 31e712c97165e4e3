// A Device for tests: records what it runs, can hold every Run until the test opens a
// gate, and writes a recognisable value (the problem's m) into C so tests can check that
// results reach the right caller.
#ifndef GEMMD_TESTS_FAKE_DEVICE_H_
#define GEMMD_TESTS_FAKE_DEVICE_H_

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/device.h"

namespace gemmd::testing {

class FakeDevice : public Device {
 public:
  explicit FakeDevice(bool gated = false) {
    description_.kind = "fake";
    description_.name = "fake:0";
    if (!gated) gate_.Notify();
  }

  const DeviceDescription& description() const override { return description_; }
  std::vector<KernelDescription> Kernels() const override {
    return {{"fake_kernel", Precision::kFp32, ""}};
  }
  absl::StatusOr<std::string> SelectKernel(const GemmProblem&, absl::string_view) const override {
    return std::string("fake_kernel");
  }
  absl::Status Run(const GemmProblem& problem, const GemmOperands& operands, absl::string_view,
                   RunTiming* timing) override {
    {
      absl::MutexLock lock(&mu_);
      ++started_;
      ran_m_.push_back(problem.m);
    }
    gate_.WaitForNotification();
    if (!status_.ok()) return status_;
    float* c = static_cast<float*>(operands.c_out);
    for (int64_t i = 0; i < problem.batch * problem.m * problem.n; ++i) {
      c[i] = static_cast<float>(problem.m);
    }
    timing->compute = absl::Milliseconds(1);
    return absl::OkStatus();
  }
  bool healthy() const override { return true; }

  void Open() { gate_.Notify(); }
  void FailWith(absl::Status status) { status_ = std::move(status); }
  int started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  std::vector<int64_t> ran_m() {
    absl::MutexLock lock(&mu_);
    return ran_m_;
  }
  // Blocks until `n` runs have begun (the device holds them at the gate).
  void AwaitStarted(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ >= n; };
    mu_.Await(absl::Condition(&reached));
  }

 private:
  DeviceDescription description_;
  absl::Notification gate_;
  absl::Status status_;
  absl::Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> ran_m_;
};

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_FAKE_DEVICE_H_
