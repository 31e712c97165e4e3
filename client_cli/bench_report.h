// What `gemm-cli bench` measured and how it is printed (text or JSON). Pure functions.
#ifndef GEMMD_CLIENT_CLI_BENCH_REPORT_H_
#define GEMMD_CLIENT_CLI_BENCH_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gemmd {

struct LatencySummary {
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0, mean_ms = 0;
};

// Nearest-rank percentiles of `latencies_ms` (empty -> all zero).
LatencySummary SummarizeLatencies(std::vector<double> latencies_ms);

struct BenchReport {
  std::string mode;    // "grpc", "grpc-async", "grpc-stream", "grpc-shm", "grpc-open-loop"
                       // or "in-process"
  std::string target;  // host:port, or the in-process backend
  std::string shape;   // "1024x1024x1024 batch=1"
  std::string dtype;
  std::string precision;
  std::string kernel;  // as the server reported it
  // --resident_b: B uploaded once (these bytes, in these seconds) and sent by handle,
  // so sent_bytes_per_request counts A alone.
  bool resident_b = false;
  int64_t resident_b_bytes = 0;
  double resident_b_upload_s = 0;
  int concurrency = 0;
  int channels = 0;
  int stripes = 1;  // connections each call's bytes went over (CallOptions::stripes)
  int outstanding = 0;  // --stream: requests in flight per stream (0: not streamed)
  double duration_s = 0;  // measured window
  double warmup_s = 0;
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;  // status code name -> count
  std::map<std::string, std::string> error_examples;  // code name -> first message
  double flops_per_request = 0;
  int64_t sent_bytes_per_request = 0;
  int64_t received_bytes_per_request = 0;
  LatencySummary latency;        // successful requests
  LatencySummary error_latency;  // failed ones: how fast the server says no
  // Means of the server's Timing over successful responses (grpc mode).
  double server_queue_ms = 0, server_copy_in_ms = 0, server_compute_ms = 0,
         server_copy_out_ms = 0, server_total_ms = 0;
  // Striped calls (client/striped_call.h): how many of the successful ones went striped,
  // and the mean of each step over those, as the client timed them.
  int64_t striped_calls = 0;
  double striped_put_ms = 0, striped_call_ms = 0, striped_get_ms = 0, striped_cleanup_ms = 0;
  int striped_row_blocks = 0;  // the most row blocks a striped call went in
  double mean_batch_size = 0;  // requests per launch, as responses report it
  // The server's compute per request: each response's launch compute over the requests
  // that shared the launch.
  double server_compute_per_request_ms = 0;
  // Open loop (--rate): the arrival rate asked for (0 = closed loop), and arrivals not
  // sent because --concurrency calls were already in flight.
  double target_rate = 0;
  std::string arrivals;
  int64_t dropped = 0;
  // CPU seconds per successful request over the measured window (0 = not measured).
  double server_cpu_us_per_request = 0;
  double client_cpu_us_per_request = 0;
  // The host's cores busy on average over the measured window (any process; 0 = not
  // measured), and how many it has.
  double host_cores_busy = 0;
  int host_cores = 0;
  // --verify: answers checked against FP64 (0 = not verified), the worst one's relative
  // error and the tolerance it is held to.
  int verified = 0;
  double verify_max_error = 0;
  double verify_tolerance = 0;

  double RequestsPerSecond() const { return duration_s > 0 ? ok / duration_s : 0; }
  double Gflops() const { return RequestsPerSecond() * flops_per_request / 1e9; }
  double SentMBps() const { return RequestsPerSecond() * sent_bytes_per_request / 1e6; }
  double ReceivedMBps() const { return RequestsPerSecond() * received_bytes_per_request / 1e6; }
};

std::string FormatBenchText(const BenchReport& report);
std::string FormatBenchJson(const BenchReport& report);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_BENCH_REPORT_H_
