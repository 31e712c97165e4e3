#include "client_cli/bench_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gemmd {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

std::string Num(double v) { return std::isfinite(v) ? absl::StrFormat("%.6g", v) : "null"; }

}  // namespace

LatencySummary SummarizeLatencies(std::vector<double> ms) {
  LatencySummary s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double p) {
    const size_t idx = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(ms.size())));
    return ms[std::min(ms.size() - 1, idx == 0 ? 0 : idx - 1)];
  };
  s.p50_ms = rank(50);
  s.p90_ms = rank(90);
  s.p99_ms = rank(99);
  s.p999_ms = rank(99.9);
  s.max_ms = ms.back();
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / static_cast<double>(ms.size());
  return s;
}

std::string FormatBenchText(const BenchReport& r) {
  int64_t errors = 0;
  std::vector<std::string> by_code;
  for (const auto& [code, count] : r.errors) {
    errors += count;
    by_code.push_back(absl::StrCat(code, "=", count));
  }
  std::string out = absl::StrFormat(
      "bench: %s %s  shape=%s dtype=%s precision=%s kernel=%s\n"
      "       concurrency=%d channels=%d stripes=%d%s warmup=%.1fs measured=%.1fs\n"
      "requests:   %d ok, %d errors  %.2f req/s\n"
      "throughput: %.2f GFLOP/s   payload %.1f MB/s (sent %.1f, received %.1f)\n"
      "latency ms: p50=%.3f p90=%.3f p99=%.3f p99.9=%.3f max=%.3f mean=%.3f\n",
      r.mode, r.target, r.shape, r.dtype, r.precision, r.kernel.empty() ? "-" : r.kernel,
      r.concurrency, r.channels, r.stripes,
      r.outstanding > 0 ? absl::StrCat(" outstanding=", r.outstanding) : std::string(),
      r.warmup_s, r.duration_s, r.ok, errors, r.RequestsPerSecond(),
      r.Gflops(), r.SentMBps() + r.ReceivedMBps(), r.SentMBps(), r.ReceivedMBps(), r.latency.p50_ms,
      r.latency.p90_ms, r.latency.p99_ms, r.latency.p999_ms, r.latency.max_ms, r.latency.mean_ms);
  if (r.resident_b) {
    absl::StrAppendFormat(&out,
                          "resident:   B by handle, uploaded once: %d bytes in %.3f s "
                          "(%.2f GB/s); requests send A alone\n",
                          r.resident_b_bytes, r.resident_b_upload_s,
                          r.resident_b_upload_s > 0
                              ? r.resident_b_bytes / r.resident_b_upload_s / 1e9
                              : 0.0);
  }
  if (r.target_rate > 0) {
    absl::StrAppendFormat(&out,
                          "open loop:  %s arrivals at %.1f/s, achieved %.1f/s, %d dropped "
                          "(latency from each intended send time)\n",
                          r.arrivals, r.target_rate, r.RequestsPerSecond(), r.dropped);
  }
  if (r.server_cpu_us_per_request > 0 || r.client_cpu_us_per_request > 0) {
    const std::string server = r.server_cpu_us_per_request > 0
                                   ? absl::StrFormat("%.1f", r.server_cpu_us_per_request)
                                   : std::string("n/a (--server_pid PID)");
    absl::StrAppendFormat(&out, "cpu us/request: server=%s client=%.1f", server,
                          r.client_cpu_us_per_request);
    if (r.host_cores_busy > 0) {
      absl::StrAppendFormat(&out, "  host: %.1f of %d cores busy", r.host_cores_busy, r.host_cores);
    }
    out += "\n";
  }
  if (r.mode != "in-process") {
    absl::StrAppendFormat(&out,
                          "server ms (mean Timing): queue=%.3f copy_in=%.3f compute=%.3f "
                          "copy_out=%.3f total=%.3f  batch=%.1f  compute/request=%.4f\n",
                          r.server_queue_ms, r.server_copy_in_ms, r.server_compute_ms,
                          r.server_copy_out_ms, r.server_total_ms, r.mean_batch_size,
                          r.server_compute_per_request_ms);
  }
  if (r.striped_calls > 0) {
    absl::StrAppendFormat(&out,
                          "striped ms (mean of %d calls, client): put=%.3f call=%.3f get=%.3f "
                          "cleanup=%.3f row_blocks=%d\n",
                          r.striped_calls, r.striped_put_ms, r.striped_call_ms, r.striped_get_ms,
                          r.striped_cleanup_ms, r.striped_row_blocks);
  }
  if (r.verified > 0) {
    absl::StrAppendFormat(&out,
                          "verify:     %d answers vs FP64: max rel_error=%.3e (tolerance %.0e) %s\n",
                          r.verified, r.verify_max_error, r.verify_tolerance,
                          r.verify_max_error <= r.verify_tolerance ? "PASS" : "FAIL");
  }
  absl::StrAppend(&out, "errors:     ", by_code.empty() ? "none" : absl::StrJoin(by_code, " "),
                  "\n");
  for (const auto& [code, message] : r.error_examples) {
    absl::StrAppend(&out, "  first ", code, ": ", message, "\n");
  }
  if (errors > 0) {
    absl::StrAppendFormat(&out, "error latency ms: p50=%.3f p99=%.3f max=%.3f\n",
                          r.error_latency.p50_ms, r.error_latency.p99_ms, r.error_latency.max_ms);
  }
  return out;
}

std::string FormatBenchJson(const BenchReport& r) {
  std::vector<std::string> errors, examples;
  for (const auto& [code, count] : r.errors) {
    errors.push_back(absl::StrCat(JsonString(code), ":", count));
  }
  for (const auto& [code, message] : r.error_examples) {
    examples.push_back(absl::StrCat(JsonString(code), ":", JsonString(message)));
  }
  return absl::StrCat(
      "{\"mode\":", JsonString(r.mode), ",\"target\":", JsonString(r.target),
      ",\"shape\":", JsonString(r.shape), ",\"dtype\":", JsonString(r.dtype),
      ",\"precision\":", JsonString(r.precision), ",\"kernel\":", JsonString(r.kernel),
      ",\"resident_b\":", r.resident_b ? "true" : "false",
      ",\"resident_b_bytes\":", r.resident_b_bytes,
      ",\"resident_b_upload_s\":", Num(r.resident_b_upload_s),
      ",\"concurrency\":", r.concurrency, ",\"channels\":", r.channels,
      ",\"stripes\":", r.stripes, ",\"outstanding\":", r.outstanding,
      ",\"warmup_s\":", Num(r.warmup_s), ",\"duration_s\":", Num(r.duration_s), ",\"ok\":", r.ok,
      ",\"errors\":{", absl::StrJoin(errors, ","), "}",
      ",\"error_examples\":{", absl::StrJoin(examples, ","), "}",
      ",\"requests_per_s\":", Num(r.RequestsPerSecond()), ",\"gflops\":", Num(r.Gflops()),
      ",\"payload_mb_per_s\":", Num(r.SentMBps() + r.ReceivedMBps()),
      ",\"sent_mb_per_s\":", Num(r.SentMBps()), ",\"received_mb_per_s\":", Num(r.ReceivedMBps()),
      ",\"latency_ms\":{\"p50\":", Num(r.latency.p50_ms), ",\"p90\":", Num(r.latency.p90_ms),
      ",\"p99\":", Num(r.latency.p99_ms), ",\"p99_9\":", Num(r.latency.p999_ms),
      ",\"max\":", Num(r.latency.max_ms),
      ",\"mean\":", Num(r.latency.mean_ms), "}",
      ",\"error_latency_ms\":{\"p50\":", Num(r.error_latency.p50_ms),
      ",\"p99\":", Num(r.error_latency.p99_ms), ",\"max\":", Num(r.error_latency.max_ms), "}",
      ",\"server_ms\":{\"queue\":", Num(r.server_queue_ms),
      ",\"copy_in\":", Num(r.server_copy_in_ms), ",\"compute\":", Num(r.server_compute_ms),
      ",\"copy_out\":", Num(r.server_copy_out_ms), ",\"total\":", Num(r.server_total_ms),
      "},\"striped_calls\":", r.striped_calls,
      ",\"striped_ms\":{\"put\":", Num(r.striped_put_ms), ",\"call\":", Num(r.striped_call_ms),
      ",\"get\":", Num(r.striped_get_ms), ",\"cleanup\":", Num(r.striped_cleanup_ms),
      "},\"striped_row_blocks\":", r.striped_row_blocks,
      ",\"mean_batch_size\":", Num(r.mean_batch_size),
      ",\"server_compute_per_request_ms\":", Num(r.server_compute_per_request_ms),
      ",\"target_rate\":", Num(r.target_rate), ",\"arrivals\":", JsonString(r.arrivals),
      ",\"dropped\":", r.dropped,
      ",\"server_cpu_us_per_request\":", Num(r.server_cpu_us_per_request),
      ",\"client_cpu_us_per_request\":", Num(r.client_cpu_us_per_request),
      ",\"host_cores_busy\":", Num(r.host_cores_busy), ",\"host_cores\":", r.host_cores,
      ",\"verify\":{\"checked\":", r.verified, ",\"max_rel_error\":", Num(r.verify_max_error),
      ",\"tolerance\":", Num(r.verify_tolerance), ",\"pass\":",
      r.verified > 0 && r.verify_max_error <= r.verify_tolerance ? "true" : "false", "}}\n");
}

}  // namespace gemmd
