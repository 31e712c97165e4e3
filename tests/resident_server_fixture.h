// What the resident-tensor server tests share: an in-process server (CPU backend) with
// PutTensor / GetTensor / DeleteTensor / ListTensors through the generated stub, and a CPU
// device the test controls (a gate that holds launches, an injected fault).
#ifndef GEMMD_TESTS_RESIDENT_SERVER_FIXTURE_H_
#define GEMMD_TESTS_RESIDENT_SERVER_FIXTURE_H_

#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "server/devices/cpu/cpu_device.h"
#include "server/gemm_server.h"
#include "server/observability/log.h"
#include "server/scheduling/batcher.h"
#include "server/store/tensor_store.h"
#include "tests/server_fixture.h"

namespace gemmd::testing {

// A CpuDevice that records each launch, can hold launches at a gate (tests keep the device
// busy so that the queue forms batches), and can fault: the launch after FaultNextRun
// fails with INTERNAL "<id> faulted: ..." and the device is unhealthy from then on, as a
// GPU that meets a fault.
class ControlledCpu : public Device {
 public:
  explicit ControlledCpu(int index = 0) : cpu_(index) {}
  const DeviceDescription& description() const override { return cpu_.description(); }
  absl::Status Run(const DeviceLaunch& launch, int lane, LaunchTimes* times) override {
    {
      absl::MutexLock lock(&mu_);
      launches_.push_back({static_cast<int>(launch.items.size()), launch.stacked,
                           launch.problem.m});
    }
    if (gated_) gate_.WaitForNotification();
    if (fault_next_.exchange(false)) {
      faulted_ = true;
      return absl::InternalError(
          absl::StrCat(DeviceId(description()), " faulted: an injected fault (test)"));
    }
    return cpu_.Run(launch, lane, times);
  }
  bool healthy() const override { return !faulted_; }
  void Close() { gated_ = true; }
  void Open() { gate_.Notify(); }
  void FaultNextRun() { fault_next_ = true; }
  struct Launch {
    int items;
    bool stacked;
    int64_t m;
  };
  std::vector<Launch> launches() {
    absl::MutexLock lock(&mu_);
    return launches_;
  }

 private:
  CpuDevice cpu_;
  std::atomic<bool> gated_{false};
  std::atomic<bool> fault_next_{false};
  std::atomic<bool> faulted_{false};
  absl::Notification gate_;
  absl::Mutex mu_;
  std::vector<Launch> launches_;
};

inline std::string Floats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

inline std::vector<float> AsFloats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

inline double MaxRelError(const std::vector<double>& ref, const std::vector<float>& got) {
  double max_abs = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(ref[i]));
    err = std::max(err, std::abs(ref[i] - got[i]));
  }
  return err / std::max(max_abs, 1e-30);
}

class ResidentServerTest : public InProcessServerTest {
 protected:
  void SetUp() override { SetLogEnabled(false); }
  void TearDown() override { SetLogEnabled(true); }

  ServerConfig Config(int64_t store_bytes = int64_t{256} << 20) {
    ServerConfig config = TestConfig();
    config.tensor_store_bytes = store_bytes;
    return config;
  }

  // A PutTensor of `chunks` as written; the handle or the status.
  absl::StatusOr<std::string> PutChunks(const std::vector<gemm::v1::TensorChunk>& chunks) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    gemm::v1::PutTensorResponse handle;
    std::unique_ptr<grpc::ClientWriter<gemm::v1::TensorChunk>> writer =
        stub_->PutTensor(&context, &handle);
    for (const gemm::v1::TensorChunk& chunk : chunks) {
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return handle.handle();
  }

  static gemm::v1::TensorChunk Header(std::vector<int64_t> shape, gemm::v1::DataType dtype) {
    gemm::v1::TensorChunk chunk;
    for (int64_t d : shape) chunk.mutable_header()->add_shape(d);
    chunk.mutable_header()->set_dtype(dtype);
    return chunk;
  }

  // A dense FLOAT32 tensor in chunks of `chunk_bytes`, on `device` ("" = the server's
  // choice).
  absl::StatusOr<std::string> PutDense(std::vector<int64_t> shape, const std::string& bytes,
                                       size_t chunk_bytes = 1000, uint32_t ttl_s = 0,
                                       const std::string& device = "") {
    std::vector<gemm::v1::TensorChunk> chunks = {Header(shape, gemm::v1::DATA_TYPE_FLOAT32)};
    chunks[0].mutable_header()->set_ttl_s(ttl_s);
    chunks[0].mutable_header()->set_device(device);
    for (size_t at = 0; at < bytes.size(); at += chunk_bytes) {
      gemm::v1::TensorChunk chunk;
      chunk.set_data(bytes.substr(at, chunk_bytes));
      chunks.push_back(std::move(chunk));
    }
    return PutChunks(chunks);
  }

  std::string Get(const std::string& handle, gemm::v1::TensorHeader* header = nullptr) {
    grpc::ClientContext context;
    gemm::v1::GetTensorRequest request;
    request.set_handle(handle);
    auto reader = stub_->GetTensor(&context, request);
    gemm::v1::TensorChunk chunk;
    std::string data;
    while (reader->Read(&chunk)) {
      if (chunk.has_header() && header != nullptr) *header = chunk.header();
      data += chunk.data();
    }
    EXPECT_TRUE(reader->Finish().ok());
    return data;
  }

  // A GetTensor that is refused: its status (and no chunk came before it).
  grpc::Status RefusedGet(const std::string& handle) {
    grpc::ClientContext context;
    gemm::v1::GetTensorRequest request;
    request.set_handle(handle);
    auto reader = stub_->GetTensor(&context, request);
    gemm::v1::TensorChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk)) << handle;
    return reader->Finish();
  }

  grpc::Status Delete(const std::string& handle) {
    grpc::ClientContext context;
    gemm::v1::TensorHandle request;
    request.set_handle(handle);
    gemm::v1::DeleteTensorResponse response;
    return stub_->DeleteTensor(&context, request, &response);
  }

  gemm::v1::ListTensorsResponse List() {
    grpc::ClientContext context;
    gemm::v1::ListTensorsResponse response;
    EXPECT_TRUE(stub_->ListTensors(&context, {}, &response).ok());
    return response;
  }

  // Starts `count` calls (start(i) starts call i) against a closed `device`: the first
  // holds it, the others queue behind it; then opens it, so they leave the queue as one
  // batch. The device has run nothing before; it is open again however this returns, so
  // a failed expectation here leaves no call hanging.
  void StartBehindTheFirst(ControlledCpu* device, size_t count,
                           const std::function<void(size_t)>& start) {
    device->Close();
    absl::Cleanup open = [device] { device->Open(); };
    for (size_t i = 0; i < count; ++i) {
      start(i);
      if (i == 0) ASSERT_TRUE(Eventually([&] { return device->launches().size() == 1; }));
    }
    ASSERT_TRUE(Eventually([&] { return server_->executor().QueueDepth() == count - 1; }));
    server_->executor().Poke();
  }

  // Nothing stored, nothing counted.
  void ExpectEmptyStore() {
    EXPECT_TRUE(Eventually([&] { return server_->store()->used_bytes() == 0; }))
        << server_->store()->used_bytes();
    EXPECT_EQ(List().tensors_size(), 0);
  }

  std::mt19937_64 rng_{11};
};

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_RESIDENT_SERVER_FIXTURE_H_
