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

TEST(ProcessCpuTest, HostBusyTimeGrowsWithWorkAndCoversThisProcess) {
  absl::StatusOr<double> host0 = HostBusyCpuSeconds();
  absl::StatusOr<double> self0 = ProcessCpuSeconds(0);
  ASSERT_TRUE(host0.ok()) << host0.status();
  ASSERT_TRUE(self0.ok());
  EXPECT_GT(*host0, 0.0);
  volatile double sink = 0;
  for (int i = 0; i < 50000000; ++i) sink = sink + i * 0.5;  // busy for a while
  absl::StatusOr<double> host1 = HostBusyCpuSeconds();
  absl::StatusOr<double> self1 = ProcessCpuSeconds(0);
  ASSERT_TRUE(host1.ok());
  ASSERT_TRUE(self1.ok());
  // The host's busy time includes this process's (less a tick or two of rounding each).
  EXPECT_GE(*host1 - *host0, *self1 - *self0 - 0.05);
  EXPECT_GT(*self1 - *self0, 0.0);
}

}  // namespace
}  // namespace gemmd
