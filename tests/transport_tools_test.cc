// The small tools around the transport: --grpc_arg parsing and the CPU-time reader
// behind gemm-cli bench --server_pid.
#include <unistd.h>

#include <gtest/gtest.h>

#include "client_cli/process_cpu.h"
#include "proto/transport_arguments.h"

namespace gemmd {
namespace {

TEST(GrpcArgsTest, ParsesNameValueListsAndNamesTheBadItem) {
  absl::StatusOr<GrpcArgs> args =
      ParseGrpcArgs("grpc.http2.max_frame_size=1048576,grpc.http2.bdp_probe=0");
  ASSERT_TRUE(args.ok());
  ASSERT_EQ(args->size(), 2u);
  EXPECT_EQ((*args)[0].first, "grpc.http2.max_frame_size");
  EXPECT_EQ((*args)[0].second, 1048576);
  EXPECT_EQ((*args)[1].second, 0);
  EXPECT_TRUE(ParseGrpcArgs("")->empty());
  for (const char* bad : {"grpc.x", "grpc.x=big", "=3", "grpc.x=1,", "grpc.x=99999999999"}) {
    absl::StatusOr<GrpcArgs> refused = ParseGrpcArgs(bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("is not NAME=INTEGER"), absl::string_view::npos);
  }
}

TEST(ProcessCpuTest, ReadsThisProcessAndRefusesAMissingOne) {
  volatile double sink = 0;
  for (int i = 0; i < 20000000; ++i) sink = sink + i * 0.5;  // some CPU time to see
  absl::StatusOr<double> self = ProcessCpuSeconds(0);
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_GT(*self, 0.0);
  absl::StatusOr<double> by_pid = ProcessCpuSeconds(static_cast<int>(getpid()));
  ASSERT_TRUE(by_pid.ok());
  EXPECT_GE(*by_pid, *self);
  EXPECT_EQ(ProcessCpuSeconds(1 << 30).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gemmd
