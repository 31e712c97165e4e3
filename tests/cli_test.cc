// The client's pieces that need no server: request building, verification, bench stats.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client_cli/bench_report.h"
#include "client_cli/cli_flags.h"
#include "client_cli/command_line.h"
#include "client_cli/quantized_inputs.h"
#include "client_cli/matmul_inputs.h"
#include "client_cli/preflight.h"
#include "client_cli/request_args.h"
#include "client_cli/resident_operands.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/quant_formats.h"

namespace gemmd {
namespace {

TEST(BenchReportTest, NearestRankPercentiles) {
  std::vector<double> ms;
  for (int i = 100; i >= 1; --i) ms.push_back(i);  // unsorted on purpose
  const LatencySummary s = SummarizeLatencies(ms);
  EXPECT_EQ(s.p50_ms, 50);
  EXPECT_EQ(s.p90_ms, 90);
  EXPECT_EQ(s.p99_ms, 99);
  EXPECT_EQ(s.max_ms, 100);
  EXPECT_DOUBLE_EQ(s.mean_ms, 50.5);
  const LatencySummary one = SummarizeLatencies({7});
  EXPECT_EQ(one.p50_ms, 7);
  EXPECT_EQ(one.p99_ms, 7);
  EXPECT_EQ(SummarizeLatencies({}).max_ms, 0);
}

TEST(BenchReportTest, RatesAndJson) {
  BenchReport r;
  r.mode = "grpc";
  r.target = "localhost:1";
  r.duration_s = 2;
  r.ok = 10;
  r.errors["RESOURCE_EXHAUSTED"] = 3;
  r.flops_per_request = 2e9;
  r.sent_bytes_per_request = 1000000;
  r.received_bytes_per_request = 500000;
  EXPECT_DOUBLE_EQ(r.RequestsPerSecond(), 5);
  EXPECT_DOUBLE_EQ(r.Gflops(), 10);
  EXPECT_DOUBLE_EQ(r.SentMBps(), 5);
  EXPECT_DOUBLE_EQ(r.ReceivedMBps(), 2.5);
  const std::string json = FormatBenchJson(r);
  EXPECT_NE(json.find("\"requests_per_s\":5,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"errors\":{\"RESOURCE_EXHAUSTED\":3}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"payload_mb_per_s\":7.5,"), std::string::npos) << json;
  r.error_latency = SummarizeLatencies({0.2, 0.1, 0.3});
  r.mean_batch_size = 12.5;
  const std::string text = FormatBenchText(r);
  EXPECT_NE(text.find("errors:     RESOURCE_EXHAUSTED=3"), std::string::npos) << text;
  EXPECT_NE(text.find("error latency ms: p50=0.200 p99=0.300 max=0.300"), std::string::npos)
      << text;
  EXPECT_NE(text.find("batch=12.5"), std::string::npos) << text;
  EXPECT_NE(FormatBenchJson(r).find("\"mean_batch_size\":12.5,"), std::string::npos);
  // Open loop and CPU per request, when measured.
  r.target_rate = 1000;
  r.arrivals = "poisson";
  r.dropped = 4;
  r.server_cpu_us_per_request = 55.5;
  r.client_cpu_us_per_request = 20;
  const std::string open_text = FormatBenchText(r);
  EXPECT_NE(open_text.find("open loop:  poisson arrivals at 1000.0/s, achieved 5.0/s, 4 dropped"),
            std::string::npos)
      << open_text;
  EXPECT_NE(open_text.find("cpu us/request: server=55.5 client=20.0"), std::string::npos)
      << open_text;
  const std::string open_json = FormatBenchJson(r);
  EXPECT_NE(open_json.find("\"target_rate\":1000,\"arrivals\":\"poisson\",\"dropped\":4,"
                           "\"server_cpu_us_per_request\":55.5,\"client_cpu_us_per_request\":20,"),
            std::string::npos)
      << open_json;
  // The host's busy cores, when measured (the text says nothing of them otherwise).
  EXPECT_EQ(open_text.find("cores busy"), std::string::npos) << open_text;
  EXPECT_NE(open_json.find("\"host_cores_busy\":0,\"host_cores\":0,"), std::string::npos)
      << open_json;
  r.host_cores_busy = 15.25;
  r.host_cores = 16;
  EXPECT_NE(FormatBenchText(r).find("client=20.0  host: 15.2 of 16 cores busy\n"),
            std::string::npos)
      << FormatBenchText(r);
  EXPECT_NE(FormatBenchJson(r).find("\"host_cores_busy\":15.25,\"host_cores\":16,"),
            std::string::npos);
  // Streams (--stream) and a sample verified (--verify); not verified: checked 0, no pass.
  EXPECT_NE(open_json.find("\"verify\":{\"checked\":0,\"max_rel_error\":0,\"tolerance\":0,"
                           "\"pass\":false}}"),
            std::string::npos)
      << open_json;
  r.mode = "grpc-stream";
  r.outstanding = 64;
  r.verified = 16;
  r.verify_max_error = 2.5e-7;
  r.verify_tolerance = 1e-5;
  const std::string stream_text = FormatBenchText(r);
  EXPECT_NE(stream_text.find("stripes=1 outstanding=64 warmup"), std::string::npos) << stream_text;
  EXPECT_NE(stream_text.find("verify:     16 answers vs FP64: max rel_error=2.500e-07 "
                             "(tolerance 1e-05) PASS"),
            std::string::npos)
      << stream_text;
  const std::string stream_json = FormatBenchJson(r);
  EXPECT_NE(stream_json.find("\"outstanding\":64,"), std::string::npos) << stream_json;
  EXPECT_NE(stream_json.find("\"verify\":{\"checked\":16,\"max_rel_error\":2.5e-07,"
                             "\"tolerance\":1e-05,\"pass\":true}}"),
            std::string::npos)
      << stream_json;
  r.verify_max_error = 2e-5;
  EXPECT_NE(FormatBenchText(r).find("(tolerance 1e-05) FAIL"), std::string::npos);
  // Striped calls: each step's mean, only where some call went striped.
  EXPECT_EQ(FormatBenchText(r).find("striped ms"), std::string::npos);
  EXPECT_NE(FormatBenchJson(r).find("\"striped_calls\":0,"), std::string::npos);
  r.striped_calls = 7;
  r.striped_put_ms = 4.25;
  r.striped_call_ms = 1.5;
  r.striped_get_ms = 6.125;
  r.striped_cleanup_ms = 0.05;
  EXPECT_NE(FormatBenchText(r).find("striped ms (mean of 7 calls, client): put=4.250 "
                                    "call=1.500 get=6.125 cleanup=0.050"),
            std::string::npos)
      << FormatBenchText(r);
  EXPECT_NE(FormatBenchJson(r).find("\"striped_calls\":7,\"striped_ms\":{\"put\":4.25,"
                                    "\"call\":1.5,\"get\":6.125,\"cleanup\":0.05}"),
            std::string::npos)
      << FormatBenchJson(r);
}

TEST(MatmulInputsTest, RandomOperandsMatchFlagsAndVerify) {
  CliOptions o;
  o.m = 9;
  o.n = 7;
  o.k = 5;
  o.batch = 2;
  o.transpose_b = true;
  o.beta = 0.5;
  o.dtype = "float16";
  absl::StatusOr<std::unique_ptr<MatmulInputs>> in = BuildMatmulInputs(o);
  ASSERT_TRUE(in.ok()) << in.status();
  const gemm::v1::MatmulRequest& r = (*in)->request;
  EXPECT_EQ(std::vector<int64_t>(r.b().shape().begin(), r.b().shape().end()),
            (std::vector<int64_t>{2, 7, 5}));
  EXPECT_EQ(r.a().dtype(), gemm::v1::DATA_TYPE_FLOAT16);
  EXPECT_EQ(r.a().data().size(), 2u * 9 * 5 * 2);
  EXPECT_EQ(r.c().data().size(), 2u * 9 * 7 * 4);
  EXPECT_EQ((*in)->problem.precision, Precision::kFp16Tensor);  // auto with float16

  // A correct C verifies near 0; a perturbed one does not.
  gemm::v1::MatmulResponse response;
  response.mutable_c()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  std::string* c = response.mutable_c()->mutable_data();
  c->resize(2 * 9 * 7 * 4);
  GemmOperands ops = (*in)->operands;
  ops.c_out = c->data();
  ASSERT_TRUE(CpuGemm((*in)->problem, ops).ok());
  absl::StatusOr<double> error = VerifyResult(**in, response, *c);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LE(*error, 1e-6);
  reinterpret_cast<float*>(c->data())[3] += 100.0f;
  EXPECT_GT(*VerifyResult(**in, response, *c), 1e-2);
  c->resize(8);
  EXPECT_EQ(VerifyResult(**in, response, *c).status().code(), absl::StatusCode::kInternal);
}

TEST(MatmulInputsTest, BadFlagsAreExplained) {
  CliOptions o;
  o.precision = "tf32";
  EXPECT_EQ(BuildMatmulInputs(o).status().message(),
            "--precision=tf32 is not one of auto, fp32, fp16_tensor, fp64");
  o = CliOptions();
  o.a_path = "/nonexistent.npy";
  EXPECT_EQ(BuildMatmulInputs(o).status().message(),
            "--a and --b go together: give both .npy files or neither");
  o.b_path = "/nonexistent2.npy";
  EXPECT_EQ(BuildMatmulInputs(o).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gemmd

namespace gemmd {
namespace {

TEST(QuantizedInputsTest, BuildsRequestsAndMeasuresBothErrors) {
  CliOptions o;
  o.m = 4;
  o.n = 8;
  o.k = 32;
  o.quant_format = "nvfp4";
  absl::StatusOr<std::unique_ptr<QuantizedInputs>> in = BuildQuantizedInputs(o);
  ASSERT_TRUE(in.ok()) << in.status();
  const QuantizedInputs& q = **in;
  ASSERT_TRUE(q.request.has_a());
  EXPECT_EQ(q.request.b().format(), gemm::v1::QUANT_FORMAT_NVFP4);
  EXPECT_EQ(q.request.b().data().size(), 8u * 32 / 2);
  EXPECT_EQ(q.request.b().scales().size(), 8u * 32 / 16);
  EXPECT_EQ(q.sent_bytes, (4 + 8) * 32 / 2 + (4 + 8) * 2);
  // A result computed from the dequantized operands has no kernel error, only the
  // format's; a wrong-sized result is refused.
  std::string c(4 * 8 * 4, '\0');
  float* cf = reinterpret_cast<float*>(c.data());
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      double sum = 0;
      for (int k = 0; k < 32; ++k) {
        sum += static_cast<double>(q.a_dequantized[i * 32 + k]) * q.b_dequantized[j * 32 + k];
      }
      cf[i * 8 + j] = static_cast<float>(sum);
    }
  }
  absl::StatusOr<QuantizedErrors> e = QuantizedResultErrors(q, c);
  ASSERT_TRUE(e.ok());
  EXPECT_LE(e->kernel, 1e-7);
  EXPECT_GT(e->format, 0.01);  // NVFP4 loses precision by design
  EXPECT_FALSE(QuantizedResultErrors(q, "short").ok());

  o.weight_only = true;
  o.dtype = "float16";
  o.quant_format = "int8";
  in = BuildQuantizedInputs(o);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE((*in)->request.has_a_dense());
  EXPECT_EQ((*in)->request.a_dense().data().size(), 4u * 32 * 2);
  EXPECT_EQ((*in)->sent_bytes, 4 * 32 * 2 + 8 * 32 + 8 * 4);

  o.quant_format = "fp4";
  EXPECT_EQ(BuildQuantizedInputs(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.quant_format = "nvfp4";
  o.k = 24;
  EXPECT_EQ(BuildQuantizedInputs(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmd

namespace gemmd {
namespace {

// The sizes come from the flags, in 64 bits, before anything is allocated.
TEST(PreflightTest, RequestSizesFollowTheFlags) {
  CliOptions o;
  o.m = 100;
  o.n = 30;
  o.k = 20;
  o.batch = 2;
  o.dtype = "float16";
  o.beta = 1.0;  // sends C as well
  o.verify = true;
  absl::StatusOr<RequestSize> s = MatmulRequestSize(o);
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t a = 2 * 100 * 20 * 2, b = 2 * 20 * 30 * 2, c = 2 * 100 * 30 * 4;
  EXPECT_EQ(s->request_bytes, a + b + c);
  EXPECT_EQ(s->result_bytes, c);
  EXPECT_EQ(s->result_elements, 2 * 100 * 30);
  EXPECT_EQ(s->largest_operand, 2 * 100 * 30);
  EXPECT_EQ(s->client_bytes, 2 * (a + b + c) + c + 2 * 100 * 30 * 8);

  o = CliOptions();
  o.m = o.k = int64_t{1} << 40;  // 2^80 elements: an error, not an allocation
  EXPECT_EQ(MatmulRequestSize(o).status().message(), "the problem's sizes multiply past 2^63");
  o.batch = -1;
  EXPECT_EQ(MatmulRequestSize(o).status().code(), absl::StatusCode::kInvalidArgument);

  o = CliOptions();
  o.m = 16;
  o.n = 64;
  o.k = 128;
  o.quant_format = "nvfp4";
  s = QuantizedRequestSize(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->request_bytes, (16 + 64) * 128 / 2 + (16 + 64) * 128 / 16 + 4 * (16 + 64));
  EXPECT_EQ(s->result_bytes, 16 * 64 * 4);
}

TEST(PreflightTest, RequestsPastTheServersLimitsOrThisMachinesMemoryAreRefused) {
  RequestSize s;
  s.request_bytes = 1000;
  s.largest_operand = 100;
  s.result_elements = 50;
  s.result_bytes = 200;
  s.client_bytes = 5000;
  const ServerLimits roomy{1 << 20, 1 << 20};
  EXPECT_TRUE(CheckRequestFits(s, roomy, 1 << 20).ok());
  EXPECT_TRUE(CheckRequestFits(s, std::nullopt, 1 << 20).ok());  // --local: memory only

  absl::Status refused = CheckRequestFits(s, ServerLimits{1 << 20, 99}, 1 << 20);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "an operand would have 100 elements; the server accepts at most 99 per operand (its "
            "--max_elements)");
  refused = CheckRequestFits(s, ServerLimits{999, 1 << 20}, 1 << 20);
  EXPECT_EQ(refused.message(),
            "the request would carry 1000 bytes of operands; the server accepts messages of at "
            "most 999 (its --max_message_bytes)");
  refused = CheckRequestFits(s, roomy, 4999);
  EXPECT_EQ(refused.message(),
            "this needs about 0.00 GB of memory here (operands, result, their copies in flight "
            "and any --verify reference); this machine has 0.00 GB available");
  EXPECT_GT(AvailableMemoryBytes(), 0);
}

TEST(PreflightTest, TimeoutsAndOutputPathsAreCheckedBeforeCalling) {
  CliOptions o;
  EXPECT_TRUE(CheckCommonFlags(o).ok());
  for (double bad : {0.0, -1.0, std::nan("")}) {
    o.timeout_s = bad;
    EXPECT_EQ(CheckCommonFlags(o).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  o = CliOptions();
  o.out_path = "/nonexistent-dir/c.npy";
  EXPECT_EQ(CheckCommonFlags(o).message(),
            "--out /nonexistent-dir/c.npy: the directory /nonexistent-dir does not exist");
  o.out_path = "/tmp";
  EXPECT_EQ(CheckCommonFlags(o).message(), "--out /tmp exists and cannot be written as a file");
  o.out_path = "c.npy";  // the working directory
  EXPECT_TRUE(CheckCommonFlags(o).ok());
}

// Flags are scoped to their command, read as absl reads them.
TEST(CliCommandLineTest, ReadsTheCommandAndTheFlagsNamed) {
  ASSERT_EQ(CliOptionsFromFlags().m, 512);  // the flags are registered (and at defaults)
  const CommandLine line = ReadCommandLine(
      {"gemm-cli", "--target", "h:1", "-m=5", "matmul", "--verify", "--nojson", "--k", "7",
       "--alpha", "-1", "extra", "--", "--concurrency"});
  EXPECT_EQ(line.command, "matmul");
  EXPECT_EQ(line.flags,
            (std::vector<std::string>{"target", "m", "verify", "json", "k", "alpha"}));
  EXPECT_FALSE(line.help);
  EXPECT_TRUE(ReadCommandLine({"gemm-cli", "bench", "--helpfull"}).help);
  EXPECT_EQ(ReadCommandLine({"gemm-cli", "--help", "quantized"}).command, "quantized");
}

TEST(CliCommandLineTest, AFlagOfAnotherCommandIsAnErrorNamingBoth) {
  const CommandSpec* health = FindCommand("health");
  ASSERT_NE(health, nullptr);
  const absl::Status s = CheckFlagsApply(ReadCommandLine({"gemm-cli", "health", "--m", "5"}),
                                         *health);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "--m does not apply to 'gemm-cli health'; its flags: --target, --timeout_s, "
            "--tls, --tls_ca_file, --tls_cert_file, --tls_key_file, --tls_server_name, "
            "--token_file (gemm-cli health --help)");
  const absl::Status bench_only = CheckFlagsApply(
      ReadCommandLine({"gemm-cli", "matmul", "--concurrency=8"}), *FindCommand("matmul"));
  EXPECT_TRUE(absl::StartsWith(bench_only.message(),
                               "--concurrency does not apply to 'gemm-cli matmul'; its flags: "
                               "--target, --timeout_s, --tls, --tls_ca_file, "
                               "--tls_cert_file, --tls_key_file, --tls_server_name, "
                               "--token_file, --m, "))
      << bench_only;
  EXPECT_TRUE(CheckFlagsApply(ReadCommandLine({"gemm-cli", "bench", "--concurrency=8", "--m",
                                               "64", "--quantized", "--format=int8"}),
                              *FindCommand("bench"))
                  .ok());
  EXPECT_EQ(FindCommand("frobnicate"), nullptr);
}

TEST(CliCommandLineTest, HelpListsTheCommandsFlagsOnlyAndNoSourcePaths) {
  const std::string matmul = HelpText(FindCommand("matmul"));
  EXPECT_TRUE(absl::StartsWith(matmul, "gemm-cli matmul: ")) << matmul;
  for (const char* flag : {"--target", "--timeout_s", "--m (default: 512)", "--verify",
                           "--out (default: \"\")"}) {
    EXPECT_TRUE(absl::StrContains(matmul, flag)) << flag << "\n" << matmul;
  }
  for (const char* other : {"--concurrency", "--format", "--json", ".cc", "client_cli/"}) {
    EXPECT_FALSE(absl::StrContains(matmul, other)) << other << "\n" << matmul;
  }
  const std::string general = HelpText(nullptr);
  for (const CommandSpec& c : Commands()) {
    EXPECT_TRUE(absl::StrContains(general, absl::StrCat("\n  ", c.name, " "))) << c.name;
  }
}

}  // namespace
}  // namespace gemmd

namespace gemmd {
namespace {

// Resident tensors as a server would describe them (headers; bytes when downloaded).
class FakeResident : public ResidentLookup {
 public:
  absl::StatusOr<ResidentOperand> Find(const std::string& handle, bool download) override {
    auto it = tensors.find(handle);
    if (it == tensors.end()) return absl::NotFoundError(absl::StrCat("@", handle, ": gone"));
    ResidentOperand r = it->second;
    r.handle = handle;
    if (download) {
      ++downloads;
      r.downloaded = true;
    } else {
      r.data.clear();
      r.scales.clear();
    }
    return r;
  }
  std::map<std::string, ResidentOperand> tensors;
  int downloads = 0;
};

ResidentOperand Dense(std::vector<int64_t> shape, gemm::v1::DataType dtype, std::string data) {
  ResidentOperand r;
  for (int64_t d : shape) r.header.add_shape(d);
  r.header.set_dtype(dtype);
  r.data = std::move(data);
  return r;
}

TEST(ResidentOperandsTest, MatmulSendsTheHandleAloneAndSizesTheRandomOperandByIt) {
  FakeResident resident;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> b(64 * 24);
  for (float& x : b) x = normal(rng);
  resident.tensors["hb"] = Dense({64, 24}, gemm::v1::DATA_TYPE_FLOAT32,
                                 std::string(reinterpret_cast<const char*>(b.data()), b.size() * 4));
  CliOptions o;
  o.b_path = "@hb";
  o.m = 5;
  o.keep_c = true;
  o.label = "c";
  absl::StatusOr<std::unique_ptr<MatmulInputs>> in = BuildMatmulInputs(o, &resident);
  ASSERT_TRUE(in.ok()) << in.status();
  const gemm::v1::MatmulRequest& r = (*in)->request;
  EXPECT_TRUE(r.has_b_ref());
  EXPECT_EQ(r.b_ref().handle(), "hb");
  EXPECT_FALSE(r.has_b());  // not inline: the encoder sends only what is set
  EXPECT_FALSE(r.has_a_ref());
  EXPECT_FALSE(r.has_c_ref());
  EXPECT_EQ(std::vector<int64_t>(r.a().shape().begin(), r.a().shape().end()),
            (std::vector<int64_t>{5, 64}));
  EXPECT_EQ((*in)->problem.n, 24);
  EXPECT_EQ((*in)->payload_bytes, 5 * 64 * 4);
  EXPECT_EQ(r.keep_c().label(), "c");
  EXPECT_FALSE((*in)->has_reference());  // not downloaded without --verify
  EXPECT_EQ(resident.downloads, 0);
  const MatmulArgs args = ArgsOf(r);
  EXPECT_EQ(args.b_ref, "hb");
  EXPECT_TRUE(args.a_ref.empty());
  ASSERT_TRUE(args.keep_c.has_value());

  // --verify downloads it, and checks a C computed from its values.
  o.verify = true;
  o.keep_c = false;
  in = BuildMatmulInputs(o, &resident);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(resident.downloads, 1);
  ASSERT_TRUE((*in)->has_reference());
  gemm::v1::MatmulResponse response;
  response.mutable_c()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  std::string c(5 * 24 * 4, '\0');
  GemmOperands ops = (*in)->operands;
  ops.c_out = c.data();
  ASSERT_TRUE(CpuGemm((*in)->problem, ops).ok());
  absl::StatusOr<double> error = VerifyResult(**in, response, c);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LE(*error, 1e-6);
}

TEST(ResidentOperandsTest, HandlesThatCannotServeAreExplained) {
  FakeResident resident;
  ResidentOperand q;
  q.header.add_shape(8);
  q.header.add_shape(32);
  q.header.set_format(gemm::v1::QUANT_FORMAT_INT8);
  resident.tensors["q"] = q;
  CliOptions o;
  o.a_path = "@q";
  o.b_path = "@missing";
  EXPECT_EQ(BuildMatmulInputs(o).status().message(),
            "--a @q: resident tensors need a server");
  absl::Status s = BuildMatmulInputs(o, &resident).status();
  EXPECT_TRUE(absl::StrContains(s.message(), "quantized")) << s;
  o.a_path = "@missing";
  EXPECT_EQ(BuildMatmulInputs(o, &resident).status().code(), absl::StatusCode::kNotFound);
  o = CliOptions();
  o.b_path = "@q";
  o.c_path = "@q";
  EXPECT_EQ(BuildMatmulInputs(o, &resident).status().message(),
            "--c is the C of beta * C: it needs --beta != 0");
}

TEST(ResidentOperandsTest, QuantizedTakesAResidentBInItsFormat) {
  std::vector<float> w(8 * 32);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  for (float& x : w) x = normal(rng);
  const Int8Matrix q = *QuantizeInt8(w.data(), 8, 32);
  ResidentOperand b;
  b.header.add_shape(8);
  b.header.add_shape(32);
  b.header.set_format(gemm::v1::QUANT_FORMAT_INT8);
  b.data.assign(reinterpret_cast<const char*>(q.values.data()), q.values.size());
  b.scales.assign(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4);
  FakeResident resident;
  resident.tensors["w"] = b;
  CliOptions o;
  o.b_path = "@w";
  o.m = 3;
  o.verify = true;  // --format stays nvfp4: the handle's INT8 wins
  absl::StatusOr<std::unique_ptr<QuantizedInputs>> in = BuildQuantizedInputs(o, &resident);
  ASSERT_TRUE(in.ok()) << in.status();
  const QuantizedInputs& qi = **in;
  EXPECT_EQ(qi.format, QuantFormat::kInt8);
  EXPECT_EQ(qi.request.b_ref().handle(), "w");
  EXPECT_FALSE(qi.request.has_b());
  EXPECT_EQ(qi.request.a().format(), gemm::v1::QUANT_FORMAT_INT8);
  EXPECT_EQ(qi.sent_bytes, 3 * 32 + 3 * 4);  // A alone
  EXPECT_EQ(qi.b_bytes, 8 * 32 + 8 * 4);
  std::vector<float> expected(w.size());
  DequantizeInt8(q, expected.data());
  EXPECT_EQ(qi.b_dequantized, expected);
  const std::string c(3 * 8 * 4, '\0');
  absl::StatusOr<QuantizedErrors> e = QuantizedResultErrors(qi, c);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->has_format);  // B's FP32 original is not here

  o.format_set = true;  // --format=nvfp4 named: it contradicts the handle
  EXPECT_EQ(BuildQuantizedInputs(o, &resident).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ResidentOperandsTest, CommandsTakeTheirOperand) {
  const CommandSpec* put = FindCommand("put");
  ASSERT_NE(put, nullptr);
  EXPECT_TRUE(CheckOperands({"w.npy"}, *put).ok());
  EXPECT_EQ(CheckOperands({}, *put).message(),
            "usage: gemm-cli put FILE.npy [flags] (gemm-cli put --help)");
  EXPECT_EQ(CheckOperands({"x"}, *FindCommand("ls")).message(),
            "'gemm-cli ls' takes no operands, not 'x' (gemm-cli ls --help)");
  EXPECT_TRUE(absl::StrContains(HelpText(put), "Usage: gemm-cli put FILE.npy [flags]"));
  EXPECT_TRUE(absl::StrContains(HelpText(FindCommand("get")), "dequantized to float32"));
  EXPECT_TRUE(CheckFlagsApply(ReadCommandLine({"gemm-cli", "matmul", "--b", "@h", "--keep_c",
                                               "--ttl_s=5"}),
                              *FindCommand("matmul"))
                  .ok());
  EXPECT_EQ(HandleOf("@abc"), "abc");
  EXPECT_EQ(HandleOf("abc.npy"), std::nullopt);
}

}  // namespace
}  // namespace gemmd
