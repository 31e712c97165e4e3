// gemm-cli put / get / rm / ls: resident tensors (TensorStoreClient). `put` prints the
// handle alone on stdout, so a script can capture it (H=$(gemm-cli put w.npy)); what it
// measured goes to stderr.
#include <grpcpp/client_context.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "client/tensor_store_client.h"
#include "client_cli/commands.h"
#include "client_cli/quantized_inputs.h"
#include "client_cli/resident_operands.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/npy_io.h"
#include "proto/proto_types.h"

namespace gemmd {
namespace {

std::string FormatName(int format) {
  switch (format) {
    case gemm::v1::QUANT_FORMAT_INT8:
      return "INT8";
    case gemm::v1::QUANT_FORMAT_NVFP4:
      return "NVFP4";
  }
  return absl::StrCat("format ", format);
}

// "FLOAT16" for a dense tensor, "NVFP4" for a quantized one.
std::string TypeName(const gemm::v1::TensorInfo& t) {
  return t.format() != gemm::v1::QUANT_FORMAT_UNSPECIFIED ? FormatName(t.format())
                                                          : ProtoDataTypeName(t.dtype());
}

std::string UnixMsTime(int64_t ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

std::string Bytes(int64_t bytes) {
  if (bytes >= 1000000000) return absl::StrFormat("%.2f GB", bytes / 1e9);
  if (bytes >= 1000000) return absl::StrFormat("%.1f MB", bytes / 1e6);
  if (bytes >= 1000) return absl::StrFormat("%.1f kB", bytes / 1e3);
  return absl::StrCat(bytes, " B");
}

// The server's limits that bound an upload (one GetServerInfo).
absl::StatusOr<gemm::v1::Limits> ServerLimitsOf(const std::shared_ptr<grpc::Channel>& channel,
                                                double timeout_s) {
  auto stub = gemm::v1::GemmService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(timeout_s)));
  gemm::v1::ServerInfo info;
  const grpc::Status status = stub->GetServerInfo(&context, {}, &info);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  return info.limits();
}

}  // namespace

int RunPut(const CliOptions& o) {
  const std::string& path = o.args[0];
  absl::StatusOr<uint32_t> ttl = TtlOf(o);
  if (!ttl.ok()) return ReportError(ttl.status());
  if (o.connections != -1 && (o.connections < 1 || o.connections > kMaxUploadConnections)) {
    return ReportError(absl::InvalidArgumentError(
        absl::StrCat("--connections=", o.connections, " is not in [1, ", kMaxUploadConnections,
                     "] (leave it unset for the automatic choice)")));
  }
  // The tensor as it goes: the file's bytes (dense), or quantized here (--format).
  TensorRef dense;
  QuantizedTensorRef quantized;
  NpyArray array;
  gemm::v1::QuantizedTensor q;
  std::string description;
  if (o.format_set) {
    QuantFormat format = QuantFormat::kNvfp4;
    if (o.quant_format == "int8") {
      format = QuantFormat::kInt8;
    } else if (o.quant_format != "nvfp4") {
      return ReportError(absl::InvalidArgumentError(
          absl::StrCat("--format=", o.quant_format, " is not one of int8, nvfp4")));
    }
    int64_t rows = 0, k = 0;
    absl::StatusOr<std::vector<float>> x = LoadMatrix(path, &rows, &k);
    if (!x.ok()) return ReportError(x.status());
    std::vector<float> dequantized;
    if (absl::Status s = QuantizeMatrix(format, *x, rows, k, &q, &dequantized); !s.ok()) {
      return ReportError(absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message())));
    }
    quantized = {{rows, k}, q.format(), q.data(), q.scales(), q.tensor_scale()};
    description = absl::StrCat("[", rows, ",", k, "] ", QuantFormatName(format));
  } else {
    absl::StatusOr<NpyArray> read = ReadNpyFile(path);
    if (!read.ok()) return ReportError(read.status());
    array = *std::move(read);
    dense = {array.shape, DataTypeToProto(array.type), array.data};
    description =
        absl::StrCat("[", absl::StrJoin(array.shape, ","), "] ", DataTypeName(array.type));
  }
  const int64_t bytes = static_cast<int64_t>(
      o.format_set ? quantized.data.size() + quantized.scales.size() : dense.data.size());

  std::shared_ptr<grpc::Channel> channel = ConnectChannel(o.server());
  absl::StatusOr<gemm::v1::Limits> limits = ServerLimitsOf(channel, o.timeout_s);
  if (!limits.ok()) return ReportRpcError("GetServerInfo (the server's limits)", limits.status());
  if (limits->tensor_store_bytes() > 0 && bytes > limits->tensor_store_bytes()) {
    return ReportError(absl::ResourceExhaustedError(absl::StrCat(
        "the tensor takes ", bytes, " bytes; the server's tensor store holds at most ",
        limits->tensor_store_bytes(), " (its --tensor_store_bytes)")));
  }
  PutOptions put;
  put.ttl_s = *ttl;
  put.label = o.label;
  put.connections = std::max(o.connections, 0);
  put.device = o.device;
  put.timeout = absl::Seconds(o.timeout_s);
  if (o.chunk_kib > 0) put.chunk_bytes = o.chunk_bytes();
  if (limits->max_tensor_chunk_bytes() > 0) {
    put.chunk_bytes = std::min(put.chunk_bytes, limits->max_tensor_chunk_bytes());
  }
  TensorStoreClient store(channel, std::make_shared<ConnectionPool>(o.server(), 1));
  const int64_t rows = o.format_set ? quantized.shape[0]
                       : array.shape.size() == 3 ? array.shape[0] * array.shape[1]
                       : array.shape.empty()     ? 0
                                                 : array.shape[0];
  const int connections = UploadConnections(bytes, rows, put.connections);

  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> handle =
      o.format_set ? store.PutTensor(quantized, put) : store.PutTensor(dense, put);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!handle.ok()) return ReportRpcError("PutTensor", handle.status());
  std::printf("%s\n", handle->c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "put: %s, %lld bytes in %.3f s (%.2f GB/s) over %d connection%s\n",
               description.c_str(), static_cast<long long>(bytes), seconds,
               seconds > 0 ? bytes / seconds / 1e9 : 0.0, connections,
               connections == 1 ? "" : "s");
  return 0;
}

int RunGet(const CliOptions& o) {
  if (o.out_path.empty()) {
    return ReportError(absl::InvalidArgumentError("gemm-cli get HANDLE needs --out F.npy"));
  }
  if (o.connections != -1 && (o.connections < 1 || o.connections > kMaxUploadConnections)) {
    return ReportError(absl::InvalidArgumentError(
        absl::StrCat("--connections=", o.connections, " is not in [1, ", kMaxUploadConnections,
                     "] (leave it unset for one)")));
  }
  const int connections = std::max(o.connections, 1);
  TensorStoreClient store(o.server());
  const absl::Time start = absl::Now();
  absl::StatusOr<DownloadedTensor> got =
      store.GetTensor(o.args[0], absl::Seconds(o.timeout_s), connections);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!got.ok()) return ReportRpcError("GetTensor", got.status());
  const int64_t received = static_cast<int64_t>(got->data.size() + got->scales.size());
  NpyArray out;
  out.shape.assign(got->header.shape().begin(), got->header.shape().end());
  std::string how;
  const bool quantized = got->header.format() != gemm::v1::QUANT_FORMAT_UNSPECIFIED;
  const std::optional<DataType> type = DataTypeFromProto(got->header.dtype());
  if (!quantized && type &&
      (*type == DataType::kFloat32 || *type == DataType::kFloat16 || *type == DataType::kFloat64)) {
    out.type = *type;
    out.data = std::move(got->data);
    how = DataTypeName(*type);
  } else {
    // .npy has no bfloat16, and the quantized formats are not arrays numpy reads: FP32.
    ResidentOperand operand;
    operand.handle = o.args[0];
    operand.header = got->header;
    operand.data = std::move(got->data);
    operand.scales = std::move(got->scales);
    operand.downloaded = true;
    absl::StatusOr<std::vector<float>> values = ValuesAsFloat(operand);
    if (!values.ok()) return ReportError(values.status());
    out.type = DataType::kFloat32;
    out.data.assign(reinterpret_cast<const char*>(values->data()), values->size() * 4);
    how = quantized ? absl::StrCat(FormatName(got->header.format()), " dequantized to FLOAT32")
                    : absl::StrCat(ProtoDataTypeName(got->header.dtype()), " as FLOAT32");
  }
  if (absl::Status s = WriteNpyFile(o.out_path, out); !s.ok()) return ReportError(s);
  std::printf("wrote %s: [%s] %s\n", o.out_path.c_str(), absl::StrJoin(out.shape, ",").c_str(),
              how.c_str());
  std::fprintf(stderr, "get: %lld bytes in %.3f s (%.2f GB/s) over %d connection%s\n",
               static_cast<long long>(received), seconds,
               seconds > 0 ? received / seconds / 1e9 : 0.0, connections,
               connections == 1 ? "" : "s");
  return 0;
}

int RunRm(const CliOptions& o) {
  TensorStoreClient store(ConnectChannel(o.server()));
  if (absl::Status s = store.DeleteTensor(o.args[0], absl::Seconds(o.timeout_s)); !s.ok()) {
    return ReportRpcError("DeleteTensor", s);
  }
  std::printf("deleted %s\n", o.args[0].c_str());
  return 0;
}

int RunLs(const CliOptions& o) {
  TensorStoreClient store(ConnectChannel(o.server()));
  absl::StatusOr<gemm::v1::ListTensorsResponse> list =
      store.ListTensors(absl::Seconds(o.timeout_s));
  if (!list.ok()) return ReportRpcError("ListTensors", list.status());
  if (o.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(*list, &json, options);
    std::printf("%s", json.c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"HANDLE", "SHAPE", "TYPE", "BYTES", "DEVICE", "CREATED (UTC)", "EXPIRES (UTC)", "LABEL"}};
  for (const gemm::v1::TensorInfo& t : list->tensors()) {
    rows.push_back({t.handle().handle(), absl::StrCat("[", absl::StrJoin(t.shape(), ","), "]"),
                    TypeName(t) + (t.complete() ? "" : " (uploading)"), absl::StrCat(t.bytes()),
                    t.device(), UnixMsTime(t.created_unix_ms()),
                    t.expires_unix_ms() == 0 ? "never" : UnixMsTime(t.expires_unix_ms()),
                    t.label()});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();  // an empty label
    std::printf("%s\n", line.c_str());
  }
  std::printf("store: %s used of %s (%d tensor%s)\n", Bytes(list->store_bytes()).c_str(),
              list->store_cap_bytes() > 0 ? Bytes(list->store_cap_bytes()).c_str() : "no cap",
              list->tensors_size(), list->tensors_size() == 1 ? "" : "s");
  return 0;
}

}  // namespace gemmd
