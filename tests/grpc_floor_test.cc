// grpc-floor (bench/grpc_floor.cc), the yardstick the transport benchmarks price
// gemm-server against, as a process: on the completion-queue API it must serve a striped
// call's tensor-store RPCs (bench/floor_tensors.h), or `gemm-cli bench --stripes N`
// against it would fall back to one connection and time something else. So: the call
// goes striped, C is zeros of C's shape, a resident tensor's parts and row ranges come
// back at their sizes, deletes forget it, and a part of an unknown tensor is NOT_FOUND;
// the same with --copy_payloads.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "client/tensor_store_client.h"
#include "tests/child_process.h"

namespace gemmd::testing {
namespace {

// A grpc-floor child on the queues' API, on a port it picked; -1 when it does not start.
int StartFloor(ChildProcess& floor) {
  const std::string key = "grpc-floor on 127.0.0.1:";
  const absl::Time limit = absl::Now() + absl::Seconds(30);
  while (absl::Now() < limit) {
    const std::string out = floor.out();
    if (const size_t at = out.find(key); at != std::string::npos) {
      const size_t begin = at + key.size();
      int port = -1;
      if (!absl::SimpleAtoi(out.substr(begin, out.find(' ', begin) - begin), &port)) return -1;
      return port;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return -1;
}

class GrpcFloorTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    std::vector<std::string> argv = {GRPC_FLOOR_BINARY, "--api", "async", "--threads", "2",
                                     "--port",          "0"};
    if (GetParam()) argv.push_back("--copy_payloads");
    floor_ = std::make_unique<ChildProcess>(argv);
    const int port = StartFloor(*floor_);
    ASSERT_GT(port, 0) << floor_->err();
    target_ = absl::StrCat("127.0.0.1:", port);
  }

  std::unique_ptr<ChildProcess> floor_;
  std::string target_;
};

TEST_P(GrpcFloorTest, AnswersAStripedCallWithZerosOfCsShape) {
  const int64_t m = 600, k = 500, n = 700;  // operands and C over 1 MiB: two parts or more
  const std::string a(static_cast<size_t>(m * k * 4), '\x01');
  const std::string b(static_cast<size_t>(k * n * 4), '\x02');
  MatmulArgs args;
  args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT32, a};
  args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, b};
  Endpoint endpoint(target_);
  GemmClient client(endpoint);
  CallOptions options;
  options.stripes = 4;
  MatmulResult result;
  const absl::Status s = client.Matmul(args, options, &result);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(result.striped_steps().has_value()) << "the call fell back to one connection";
  ASSERT_EQ(result.info().c().shape_size(), 2);
  EXPECT_EQ(result.info().c().shape(0), m);
  EXPECT_EQ(result.info().c().shape(1), n);
  EXPECT_EQ(result.info().kernel(), "none (grpc-floor)");
  ASSERT_EQ(result.c().size(), static_cast<size_t>(m * n * 4));
  EXPECT_EQ(result.c().find_first_not_of('\0'), absl::string_view::npos);
}

TEST_P(GrpcFloorTest, KeepsShapesNotBytesAndForgetsDeletedTensors) {
  const int64_t rows = 1000, cols = 600;  // 2.4 MiB of FP32: in parts of 1 MiB or more
  const std::string data(static_cast<size_t>(rows * cols * 4), '\x05');
  Endpoint endpoint(target_);
  TensorStoreClient store(endpoint);
  PutOptions put;
  put.connections = 3;
  absl::StatusOr<std::string> handle =
      store.PutTensor(TensorRef{{rows, cols}, gemm::v1::DATA_TYPE_FLOAT32, data}, put);
  ASSERT_TRUE(handle.ok()) << handle.status();
  absl::StatusOr<DownloadedTensor> back = store.GetTensor(*handle, absl::Seconds(30), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->header.shape_size(), 2);
  EXPECT_EQ(back->header.shape(0), rows);
  EXPECT_EQ(back->header.shape(1), cols);
  ASSERT_EQ(back->data.size(), data.size());
  EXPECT_EQ(back->data.find_first_not_of('\0'), std::string::npos);  // zeros: nothing kept
  EXPECT_TRUE(store.DeleteTensor(*handle, absl::Seconds(10)).ok());
  const absl::Status again = store.DeleteTensor(*handle, absl::Seconds(10));
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound) << again;
  const absl::StatusOr<DownloadedTensor> gone = store.GetTensor(*handle, absl::Seconds(10), 1);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
}

INSTANTIATE_TEST_SUITE_P(CopyPayloads, GrpcFloorTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "CopyingPayloads" : "DroppingPayloads";
                         });

}  // namespace
}  // namespace gemmd::testing
