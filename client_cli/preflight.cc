#include "client_cli/preflight.h"

#include "client/striped_call.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gemmd {
namespace {

// a*b*...; false past 2^63.
bool Product(std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return false;
  }
  *out = p;
  return true;
}

bool Sum(std::initializer_list<int64_t> terms, int64_t* out) {
  int64_t s = 0;
  for (int64_t t : terms) {
    if (__builtin_add_overflow(s, t, &s)) return false;
  }
  *out = s;
  return true;
}

bool IsFloat64(const std::string& dtype) {
  return dtype == "float64" || dtype == "fp64" || dtype == "f64";
}
int64_t DtypeBytes(const std::string& dtype) {
  return IsFloat64(dtype) ? 8 : dtype == "float32" ? 4 : 2;
}

int64_t FileBytes(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

std::string Gb(int64_t bytes) { return absl::StrFormat("%.2f GB", bytes / 1e9); }

absl::Status TooLarge() {
  return absl::InvalidArgumentError("the problem's sizes multiply past 2^63");
}

}  // namespace

absl::StatusOr<RequestSize> MatmulRequestSize(const CliOptions& o) {
  RequestSize s;
  // Unset: FLOAT32, or FLOAT64 for float64 operands (FP64).
  const std::string out =
      o.output_dtype.empty() ? (IsFloat64(o.dtype) ? o.dtype : "float32") : o.output_dtype;
  const int64_t out_bytes = IsFloat64(out) ? 8 : out == "float16" || out == "bfloat16" ? 2 : 4;
  if (!o.a_path.empty() || !o.b_path.empty()) {
    // The files hold the operands (plus small headers); the result's size is only known
    // once they are read, which the server's own checks then cover.
    s.request_bytes = FileBytes(o.a_path) + FileBytes(o.b_path);
    s.client_bytes = 2 * s.request_bytes;
    return s;
  }
  if (o.m < 1 || o.n < 1 || o.k < 1 || o.batch < 0) {
    return absl::InvalidArgumentError("--m, --n, --k must be >= 1 and --batch >= 0");
  }
  const int64_t items = std::max<int64_t>(o.batch, 1);
  const int64_t in_bytes = DtypeBytes(o.dtype);
  int64_t a = 0, b = 0, c = 0, request = 0, result = 0, held = 0;
  if (!Product({items, o.m, o.k}, &a) || !Product({items, o.k, o.n}, &b) ||
      !Product({items, o.m, o.n}, &c)) {
    return TooLarge();
  }
  int64_t a_bytes = 0, b_bytes = 0, c_in_bytes = 0;
  if (!Product({a, in_bytes}, &a_bytes) || !Product({b, in_bytes}, &b_bytes) ||
      !Product({c, out_bytes}, &result)) {
    return TooLarge();
  }
  if (o.beta != 0.0) c_in_bytes = result;
  if (!Sum({a_bytes, b_bytes, c_in_bytes}, &request)) return TooLarge();
  // The request, its serialized copy in gRPC, the response, and the FP64 reference.
  int64_t reference = 0;
  if (o.verify && !Product({c, 8}, &reference)) return TooLarge();
  if (!Sum({request, request, result, reference}, &held)) return TooLarge();
  s.request_bytes = request;
  s.largest_operand = std::max({a, b, o.beta != 0.0 ? c : 0});
  s.result_elements = c;
  s.result_bytes = result;
  s.client_bytes = held;
  return s;
}

absl::StatusOr<RequestSize> QuantizedRequestSize(const CliOptions& o) {
  RequestSize s;
  if (!o.a_path.empty() || !o.b_path.empty()) {
    const int64_t files = FileBytes(o.a_path) + FileBytes(o.b_path);
    s.request_bytes = files;  // at most: quantized takes fewer bytes than the FP32 files
    s.client_bytes = 3 * files;
    return s;
  }
  if (o.m < 1 || o.n < 1 || o.k < 1) {
    return absl::InvalidArgumentError("--m, --n and --k must be >= 1");
  }
  int64_t a = 0, b = 0, c = 0;
  if (!Product({o.m, o.k}, &a) || !Product({o.n, o.k}, &b) || !Product({o.m, o.n}, &c)) {
    return TooLarge();
  }
  // Bytes per value on the wire: INT8 1 (+ a scale per row), NVFP4 0.5 + 1/16; a dense A
  // (weight-only) as --dtype.
  const double per_value = o.quant_format == "int8" ? 1.0 : 0.5625;
  const double a_wire = o.weight_only ? static_cast<double>(a) * DtypeBytes(o.dtype)
                                      : static_cast<double>(a) * per_value;
  const double request = a_wire + static_cast<double>(b) * per_value +
                         4.0 * static_cast<double>(o.m + o.n);
  // FP32 originals and dequantized copies of both operands, the request (twice: built and
  // serialized), the result, and for --verify two FP64 references.
  const double held = 8.0 * static_cast<double>(a + b) + 2 * request + 4.0 * c +
                      (o.verify ? 16.0 * c : 0.0);
  if (!(held < 9.2e18)) return TooLarge();
  s.request_bytes = static_cast<int64_t>(std::ceil(request));
  s.largest_operand = std::max(a, b);
  s.result_elements = c;
  s.result_bytes = 4 * c;
  s.client_bytes = static_cast<int64_t>(held);
  return s;
}

absl::Status CheckRequestFits(const RequestSize& s, const std::optional<ServerLimits>& limits,
                              int64_t available_bytes) {
  if (limits.has_value()) {
    if (limits->max_elements > 0 && s.largest_operand > limits->max_elements) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "an operand would have ", s.largest_operand, " elements; the server accepts at most ",
          limits->max_elements, " per operand (its --max_elements)"));
    }
    if (limits->max_elements > 0 && s.result_elements > limits->max_elements) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the result would have ", s.result_elements, " elements; the server accepts at most ",
          limits->max_elements, " (its --max_elements)"));
    }
    if (limits->max_message_bytes > 0 && s.request_bytes > limits->max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request would carry ", s.request_bytes, " bytes of operands; the server accepts "
          "messages of at most ", limits->max_message_bytes, " (its --max_message_bytes)"));
    }
    if (limits->max_message_bytes > 0 && s.result_bytes > limits->max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the result would be ", s.result_bytes, " bytes; the server sends messages of at "
          "most ", limits->max_message_bytes, " (its --max_message_bytes)"));
    }
  }
  if (available_bytes > 0 && s.client_bytes > available_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this needs about ", Gb(s.client_bytes), " of memory here (operands, result",
        ", their copies in flight and any --verify reference); this machine has ",
        Gb(available_bytes), " available"));
  }
  return absl::OkStatus();
}

int64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

absl::Status CheckCommonFlags(const CliOptions& o) {
  if (!(o.timeout_s > 0) || !std::isfinite(o.timeout_s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout_s must be a number of seconds > 0, not ", o.timeout_s));
  }
  if (o.stripes < 0 || o.stripes > kMaxStripes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stripes=", o.stripes, " is not in [0, ", kMaxStripes,
        "] (0 = the client's choice, 1 = one connection)"));
  }
  if (o.row_blocks < 0 || o.row_blocks > kMaxRowBlocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--row_blocks=", o.row_blocks, " is not in [0, ", kMaxRowBlocks,
        "] (0 = the client's choice, 1 = whole)"));
  }
  if (o.chunk_kib != 0 && (o.chunk_kib < 64 || o.chunk_kib > (1 << 20))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk_kib=", o.chunk_kib, " is not 0 (the default) or in [64, 1048576]"));
  }
  if (!o.out_path.empty()) {
    const size_t slash = o.out_path.rfind('/');
    const std::string dir =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : o.out_path.substr(0, slash));
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--out ", o.out_path, ": the directory ", dir, " does not exist"));
    }
    if (access(dir.c_str(), W_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--out ", o.out_path, ": the directory ", dir, " is not writable"));
    }
    if (stat(o.out_path.c_str(), &st) == 0 && (S_ISDIR(st.st_mode) || access(o.out_path.c_str(), W_OK) != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--out ", o.out_path, " exists and cannot be written as a file"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gemmd
