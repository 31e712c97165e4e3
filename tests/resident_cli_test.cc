// gemm-cli's resident tensor commands as a user runs them, against a gemm-server process
// (--backend cpu): put prints the handle alone on stdout, get writes back what was put
// (dense, quantized dequantized, parallel parts), ls lists it, matmul and quantized by
// handle equal the same call inline, --keep_c, bench --resident_b deletes its B, and a
// removed tensor is NOT_FOUND. The server serves as two devices (--cpu_devices=2), so
// tensors spread over them and put --device places one.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/npy_io.h"
#include "kernels/quant_formats.h"
#include "tests/child_process.h"

namespace gemmd::testing {
namespace {

class ResidentCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ChildProcess({GEMM_SERVER_BINARY, "--backend=cpu", "--cpu_devices=2",
                                "--host=127.0.0.1", "--port=0", "--metrics_port=-1"});
    port_ = StartedServerPort(*server_);
  }
  static void TearDownTestSuite() {
    delete server_;  // SIGKILL: nothing of it is checked
    server_ = nullptr;
    for (const std::string& path : *files_) std::remove(path.c_str());
  }
  void SetUp() override { ASSERT_GT(port_, 0) << server_->err(); }

  struct Run {
    int code = -1;
    std::string out, err;
  };
  // gemm-cli `args` against the server.
  Run Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {GEMM_CLI_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(absl::StrCat("--target=127.0.0.1:", port_));
    ChildProcess cli(argv);
    Run r;
    r.code = cli.Wait(absl::Seconds(120));
    r.out = cli.out();
    r.err = cli.err();
    return r;
  }
  // `put` the file (with `flags`); the handle it printed.
  std::string Put(const std::string& path, std::vector<std::string> flags = {}) {
    flags.insert(flags.begin(), {"put", path});
    const Run r = Cli(flags);
    EXPECT_EQ(r.code, 0) << r.err;
    // The handle, and nothing else, on stdout; the summary on stderr.
    EXPECT_TRUE(absl::EndsWith(r.out, "\n")) << r.out;
    const std::string handle(absl::StripSuffix(r.out, "\n"));
    EXPECT_FALSE(absl::StrContains(handle, "\n")) << r.out;
    EXPECT_FALSE(absl::StrContains(handle, " ")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.err, "GB/s")) << r.err;
    return handle;
  }

  // A file of this test run, removed at the end.
  static std::string Path(const std::string& name) {
    files_->push_back(absl::StrCat(::testing::TempDir(), "resident_cli_", getpid(), "_", name));
    return files_->back();
  }

  static ChildProcess* server_;
  static int port_;
  static std::vector<std::string>* files_;
};

ChildProcess* ResidentCliTest::server_ = nullptr;
int ResidentCliTest::port_ = -1;
std::vector<std::string>* ResidentCliTest::files_ = new std::vector<std::string>;

std::vector<float> Gaussian(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = normal(rng);
  return v;
}

// A FLOAT32 .npy of N(0,1) values; returns its array.
NpyArray WriteFloats(const std::string& path, std::vector<int64_t> shape, uint64_t seed) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  const std::vector<float> v = Gaussian(count, seed);
  NpyArray a;
  a.shape = std::move(shape);
  a.type = DataType::kFloat32;
  a.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  EXPECT_TRUE(WriteNpyFile(path, a).ok());
  return a;
}

NpyArray Read(const std::string& path) {
  absl::StatusOr<NpyArray> a = ReadNpyFile(path);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *std::move(a) : NpyArray();
}

TEST_F(ResidentCliTest, PutGetLsRmRoundTrip) {
  const std::string in = Path("dense.npy"), out = Path("dense_out.npy");
  const NpyArray a = WriteFloats(in, {300, 70}, 1);
  const std::string handle = Put(in, {"--label=round-trip", "--ttl_s=600"});

  Run r = Cli({"get", handle, "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  const NpyArray got = Read(out);
  EXPECT_EQ(got.shape, a.shape);
  EXPECT_EQ(got.type, DataType::kFloat32);
  EXPECT_TRUE(got.data == a.data);

  r = Cli({"ls"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "HANDLE")) << r.out;
  size_t line_at = r.out.find(handle);
  ASSERT_NE(line_at, std::string::npos) << r.out;
  const std::string line = r.out.substr(line_at, r.out.find('\n', line_at) - line_at);
  for (const char* field : {"[300,70]", "FLOAT32", "round-trip", "cpu:"}) {
    EXPECT_TRUE(absl::StrContains(line, field)) << field << "\n" << line;
  }
  EXPECT_FALSE(absl::StrContains(line, "never")) << line;  // it has a TTL
  EXPECT_TRUE(absl::StrContains(r.out, "\nstore: ")) << r.out;

  r = Cli({"rm", handle});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Cli({"get", handle, "--out", out});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "NOT_FOUND")) << r.err;
  r = Cli({"rm", handle});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "NOT_FOUND")) << r.err;
  r = Cli({"ls"});
  EXPECT_FALSE(absl::StrContains(r.out, handle)) << r.out;
}

TEST_F(ResidentCliTest, PutOnANamedDeviceAndOperandsOnTwoDevices) {
  const std::string a_path = Path("a_on_device.npy"), b_path = Path("b_on_device.npy");
  WriteFloats(a_path, {4, 8}, 3);
  WriteFloats(b_path, {8, 5}, 4);
  const std::string a = Put(a_path, {"--device=cpu:1"});
  const std::string b0 = Put(b_path, {"--device=cpu:0"});
  const std::string b1 = Put(b_path, {"--device=cpu:1"});
  Run r = Cli({"ls"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto line_of = [&](const std::string& handle) {
    const size_t at = r.out.find(handle);
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find('\n', at) - at);
  };
  EXPECT_TRUE(absl::StrContains(line_of(a), "cpu:1")) << r.out;
  EXPECT_TRUE(absl::StrContains(line_of(b0), "cpu:0")) << r.out;
  EXPECT_TRUE(absl::StrContains(line_of(b1), "cpu:1")) << r.out;

  r = Cli({"matmul", "--a", "@" + a, "--b", "@" + b1, "--verify"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "PASS")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "cpu:1")) << r.out;  // where it ran
  r = Cli({"matmul", "--a", "@" + a, "--b", "@" + b0});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "FAILED_PRECONDITION")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "A is resident on cpu:1 and B on cpu:0")) << r.err;

  r = Cli({"put", a_path, "--device=cuda:3"});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(absl::StrContains(
      r.err, "header.device \"cuda:3\" is no device of this server; its devices: cpu:0, cpu:1"))
      << r.err;
  EXPECT_EQ(r.out, "");
  for (const std::string& handle : {a, b0, b1}) EXPECT_EQ(Cli({"rm", handle}).code, 0);
}

TEST_F(ResidentCliTest, QuantizedPutReadsBackDequantized) {
  const std::string in = Path("w.npy"), out = Path("w_out.npy");
  const int64_t rows = 64, k = 256;
  const NpyArray w = WriteFloats(in, {rows, k}, 2);
  const float* x = reinterpret_cast<const float*>(w.data.data());
  for (const char* format : {"int8", "nvfp4"}) {
    SCOPED_TRACE(format);
    std::vector<float> expected(static_cast<size_t>(rows * k));
    if (std::string(format) == "int8") {
      DequantizeInt8(*QuantizeInt8(x, rows, k), expected.data());
    } else {
      ASSERT_TRUE(DequantizeNvfp4(*QuantizeNvfp4(x, rows, k), expected.data()).ok());
    }
    const std::string handle = Put(in, {absl::StrCat("--format=", format)});
    const Run r = Cli({"get", handle, "--out", out});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "dequantized to FLOAT32")) << r.out;
    const NpyArray got = Read(out);
    EXPECT_EQ(got.shape, (std::vector<int64_t>{rows, k}));
    ASSERT_EQ(got.data.size(), expected.size() * 4);
    EXPECT_EQ(std::memcmp(got.data.data(), expected.data(), got.data.size()), 0);
    EXPECT_EQ(Cli({"rm", handle}).code, 0);
  }
}

TEST_F(ResidentCliTest, ParallelPartsReadBackWhole) {
  const std::string in = Path("big.npy"), out = Path("big_out.npy");
  const NpyArray a = WriteFloats(in, {1001, 1500}, 3);  // 6 MB: several chunks per part
  const std::string handle = Put(in, {"--connections=3"});
  const Run r = Cli({"get", handle, "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Read(out).data == a.data);
  EXPECT_EQ(Cli({"rm", handle}).code, 0);
}

TEST_F(ResidentCliTest, MatmulByHandleEqualsInlineAndKeepsC) {
  const std::string a = Path("a.npy"), b = Path("b.npy");
  const std::string c_inline = Path("c_inline.npy"), c_ref = Path("c_ref.npy"),
                    c_kept = Path("c_kept.npy");
  WriteFloats(a, {40, 300}, 4);
  WriteFloats(b, {300, 24}, 5);
  Run r = Cli({"matmul", "--a", a, "--b", b, "--out", c_inline});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string handle = Put(b);

  r = Cli({"matmul", "--a", a, "--b", "@" + handle, "--out", c_ref, "--verify"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "PASS")) << r.out;
  EXPECT_TRUE(Read(c_ref).data == Read(c_inline).data);

  // C kept on the server: its handle printed; --out downloads it.
  r = Cli({"matmul", "--a", a, "--b", "@" + handle, "--keep_c", "--label=c", "--out", c_kept});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const size_t at = r.out.find("c_ref=");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string kept = r.out.substr(at + 6, r.out.find('\n', at) - at - 6);
  EXPECT_TRUE(Read(c_kept).data == Read(c_inline).data);
  EXPECT_TRUE(absl::StrContains(Cli({"ls"}).out, kept));
  EXPECT_EQ(Cli({"rm", kept}).code, 0);

  // Removed, then used: NOT_FOUND.
  EXPECT_EQ(Cli({"rm", handle}).code, 0);
  r = Cli({"matmul", "--a", a, "--b", "@" + handle});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "NOT_FOUND")) << r.err;
}

TEST_F(ResidentCliTest, QuantizedByHandleVerifies) {
  const std::string w = Path("qw.npy");
  WriteFloats(w, {48, 128}, 6);
  const std::string handle = Put(w, {"--format=int8"});
  Run r = Cli({"quantized", "--b", "@" + handle, "--m=5", "--verify"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "c: shape=[5,48]")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "PASS")) << r.out;
  r = Cli({"quantized", "--b", "@" + handle, "--m=5", "--weight_only", "--verify"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "PASS")) << r.out;
  EXPECT_EQ(Cli({"rm", handle}).code, 0);
}

TEST_F(ResidentCliTest, BenchWithAResidentBDeletesItAfterwards) {
  for (const char* quantized : {"--noquantized", "--quantized"}) {
    SCOPED_TRACE(quantized);
    Run r = Cli({"bench", "--m=4", "--n=64", "--k=64", "--resident_b", quantized,
                 "--duration_s=0.3", "--warmup_s=0"});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "resident:   B by handle")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "errors:     none")) << r.out;
    r = Cli({"ls"});
    EXPECT_FALSE(absl::StrContains(r.out, "gemm-cli bench B")) << r.out;
  }
}

// --connections 0 was taken, and 1000 opened 256 connections for 128 KB. Now: 1 to 64,
// and never more parts than 1 MiB each.
TEST_F(ResidentCliTest, PutConnectionsAreCheckedAndSmallTensorsGoInOnePart) {
  const std::string small = Path("small.npy");
  WriteFloats(small, {256, 128}, 5);  // 128 KiB
  for (const char* bad : {"--connections=0", "--connections=1000", "--connections=-3"}) {
    const Run r = Cli({"put", small, bad});
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_TRUE(absl::StrContains(r.err,
                                  "is not in [1, 64] (leave it unset for the automatic "
                                  "choice)"))
        << r.err;
    EXPECT_EQ(r.out, "");
  }
  Run r = Cli({"put", small, "--connections=64"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "over 1 connection\n")) << r.err;
  EXPECT_EQ(Cli({"rm", std::string(absl::StripSuffix(r.out, "\n"))}).code, 0);
}

// An open loop kept --concurrency 1 and dropped arrivals without a word; now it takes 256
// calls in flight unless told otherwise, and says when arrivals were dropped. Without
// --server_pid the server's CPU is "n/a", not 0.0.
TEST_F(ResidentCliTest, BenchOpenLoopKeepsUpAndSaysWhatItDropped) {
  Run r =
      Cli({"bench", "--m=8", "--n=8", "--k=8", "--rate=400", "--duration_s=0.5", "--warmup_s=0"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, " 0 dropped")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.err, "dropped")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "cpu us/request: server=n/a (--server_pid PID)")) << r.out;
  // One call in flight at most against a server that takes longer than the gaps.
  r = Cli({"bench", "--m=512", "--n=512", "--k=512", "--rate=400", "--concurrency=1",
           "--duration_s=0.5", "--warmup_s=0"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "arrivals were dropped: each found 1 calls in flight"))
      << r.err;
}

// --shm: the operands and C through a shared-memory region (matmul, quantized dense and
// weight-only, bench with a C per call in flight), verified against FP64; the regions
// are gone afterwards.
TEST_F(ResidentCliTest, ShmRunsEveryGemmCommandThroughARegion) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"matmul", "--m=96", "--n=80", "--k=64", "--batch=2", "--verify"},
           {"matmul", "--m=64", "--n=48", "--k=32", "--dtype=float16", "--beta=0.5", "--verify"},
           {"quantized", "--format=int8", "--m=16", "--n=64", "--k=128", "--verify"},
           {"quantized", "--format=nvfp4", "--weight_only", "--m=4", "--n=64", "--k=128",
            "--verify"}}) {
    args.push_back("--shm");
    const Run r = Cli(args);
    EXPECT_EQ(r.code, 0) << args[0] << " " << args[1] << "\n" << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "over shared memory")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "PASS")) << r.out;
  }
  const Run bench = Cli({"bench", "--m=64", "--n=64", "--k=64", "--concurrency=3", "--shm",
                         "--duration_s=0.5", "--warmup_s=0"});
  ASSERT_EQ(bench.code, 0) << bench.out << bench.err;
  EXPECT_TRUE(absl::StrContains(bench.out, "grpc-shm")) << bench.out;
  EXPECT_FALSE(absl::StrContains(bench.out, " 0 ok")) << bench.out;
  // A key outside the server's prefix is refused with its reason.
  const Run outside = Cli({"matmul", "--m=4", "--n=4", "--k=4", "--shm", "--shm_key=/elsewhere"});
  EXPECT_EQ(outside.code, 1);
  EXPECT_TRUE(absl::StrContains(outside.err, "PERMISSION_DENIED")) << outside.err;
}

// --stream: the requests on MatmulStreams, dense and quantized against a resident B, with
// a sample of the answers checked against FP64 (--verify); the flags it cannot go with
// are refused before anything is sent.
TEST_F(ResidentCliTest, BenchStreamsAndVerifiesASampleOfTheAnswers) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--m=16", "--n=32", "--k=64", "--batch=2", "--beta=0.5"},
           {"--m=1", "--n=64", "--k=128", "--quantized", "--format=nvfp4", "--weight_only",
            "--dtype=float16", "--resident_b"}}) {
    std::vector<std::string> bench = {"bench", "--stream", "--concurrency=2", "--outstanding=8",
                                      "--verify", "--duration_s=0.5", "--warmup_s=0"};
    bench.insert(bench.end(), args.begin(), args.end());
    const Run r = Cli(bench);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "grpc-stream")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "outstanding=8")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "errors:     none")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "answers vs FP64")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "PASS")) << r.out;
  }
  for (const char* other : {"--local", "--async", "--rate=10", "--shm", "--outstanding=0"}) {
    const Run r = Cli({"bench", "--stream", other, "--m=4", "--n=4", "--k=4"});
    EXPECT_EQ(r.code, 2) << other << "\n" << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "--stream runs a closed loop")) << other << r.err;
  }
  const Run local = Cli({"bench", "--local", "--verify", "--m=4", "--n=4", "--k=4"});
  EXPECT_EQ(local.code, 2) << local.err;
  EXPECT_TRUE(absl::StrContains(local.err, "--verify checks the server's answers")) << local.err;
}

}  // namespace
}  // namespace gemmd::testing
