#include "client/request_encoding.h"

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/proto_types.h"

namespace gemmd {
namespace {

// C arrives in many slices (one per HTTP/2 frame); a large one is copied into its buffer
// by a few threads, since one core's memcpy is slower than the connection delivers.
constexpr size_t kParallelCopyBytes = size_t{8} << 20;
constexpr int kCopyThreads = 4;

void CopyRuns(const wire::ByteRuns& runs, char* out) {
  if (runs.size() < kParallelCopyBytes) {
    runs.CopyTo(out);
    return;
  }
  // Runs split into kCopyThreads groups of about equal bytes, each copied by one thread.
  const std::vector<absl::string_view>& all = runs.runs();
  const size_t share = (runs.size() + kCopyThreads - 1) / kCopyThreads;
  std::vector<std::thread> threads;
  size_t first = 0, bytes = 0, at = 0, group_at = 0;
  auto copy = [&all, out](size_t from, size_t to, size_t offset) {
    for (size_t i = from; i < to; ++i) {
      std::memcpy(out + offset, all[i].data(), all[i].size());
      offset += all[i].size();
    }
  };
  for (size_t i = 0; i < all.size(); ++i) {
    bytes += all[i].size();
    at += all[i].size();
    if (bytes >= share && i + 1 < all.size()) {
      threads.emplace_back(copy, first, i + 1, group_at);
      first = i + 1;
      group_at = at;
      bytes = 0;
    }
  }
  copy(first, all.size(), group_at);
  for (std::thread& t : threads) t.join();
}


void SetTensorHead(const TensorRef& t, gemm::v1::Tensor* out) {
  for (int64_t d : t.shape) out->add_shape(d);
  out->set_dtype(t.dtype);
  if (t.shm.set()) ToProto(t.shm, out->mutable_shm());
}

void SetQuantizedHead(const QuantizedTensorRef& t, gemm::v1::QuantizedTensor* out) {
  for (int64_t d : t.shape) out->add_shape(d);
  out->set_format(t.format);
  out->set_tensor_scale(t.tensor_scale);
  if (t.data_shm.set()) ToProto(t.data_shm, out->mutable_data_shm());
  if (t.scales_shm.set()) ToProto(t.scales_shm, out->mutable_scales_shm());
}

// The bytes that go inline: none for a tensor in a region.
absl::string_view Inline(const TensorRef& t) { return t.shm.set() ? absl::string_view() : t.data; }
absl::string_view InlineData(const QuantizedTensorRef& t) {
  return t.data_shm.set() ? absl::string_view() : t.data;
}
absl::string_view InlineScales(const QuantizedTensorRef& t) {
  return t.scales_shm.set() ? absl::string_view() : t.scales;
}

void SetKeep(const std::optional<KeepResult>& keep, gemm::v1::ResidentResult* out) {
  out->set_ttl_s(keep->ttl_s);
  out->set_label(keep->label);
  out->set_temporary(keep->temporary);
}

}  // namespace

bool UsesRegions(const MatmulArgs& args) {
  return args.a.shm.set() || args.b.shm.set() || (args.c && args.c->shm.set()) ||
         args.c_shm.set();
}

bool UsesRegions(const QuantizedMatmulArgs& args) {
  auto quantized = [](const QuantizedTensorRef& t) {
    return t.data_shm.set() || t.scales_shm.set();
  };
  return (args.a && quantized(*args.a)) || (args.a_dense && args.a_dense->shm.set()) ||
         quantized(args.b) || args.c_shm.set();
}

// An operand goes by handle or inline, never both: the encoder sends a tensor's bytes
// only when its head is set.
wire::EncodedMessage EncodeMatmulArgs(const MatmulArgs& args) {
  gemm::v1::MatmulRequest head;
  if (!args.a_ref.empty()) {
    head.mutable_a_ref()->set_handle(args.a_ref);
  } else {
    SetTensorHead(args.a, head.mutable_a());
  }
  if (!args.b_ref.empty()) {
    head.mutable_b_ref()->set_handle(args.b_ref);
  } else {
    SetTensorHead(args.b, head.mutable_b());
  }
  if (!args.c_ref.empty()) {
    head.mutable_c_ref()->set_handle(args.c_ref);
  } else if (args.c) {
    SetTensorHead(*args.c, head.mutable_c());
  }
  if (args.keep_c) SetKeep(args.keep_c, head.mutable_keep_c());
  if (args.c_shm.set()) ToProto(args.c_shm, head.mutable_c_shm());
  if (args.row_plan) *head.mutable_row_plan() = *args.row_plan;
  // The FP32 fields always (what a server older than the FP64 ones reads), the FP64 ones
  // where FP32 cannot hold the value exactly.
  // Through a volatile: GCC 12.2 at -O2 may drop double -> float -> double round trips
  // written side by side (RoundedToFp32 in kernels/gemm_problem.h).
  const auto exact_in_float = [](double v) {
    const volatile float rounded = static_cast<float>(v);
    return static_cast<double>(rounded) == v;
  };
  if (args.alpha) {
    head.set_alpha(static_cast<float>(*args.alpha));
    if (!exact_in_float(*args.alpha)) head.set_alpha_f64(*args.alpha);
  }
  head.set_beta(static_cast<float>(args.beta));
  if (!exact_in_float(args.beta)) head.set_beta_f64(args.beta);
  head.set_transpose_a(args.transpose_a);
  head.set_transpose_b(args.transpose_b);
  head.set_precision(args.precision);
  head.set_output_dtype(args.output_dtype);
  head.set_kernel(args.kernel);
  return wire::EncodeMatmulRequest(head, Inline(args.a), Inline(args.b),
                                   args.c ? Inline(*args.c) : absl::string_view());
}

wire::EncodedMessage EncodeQuantizedArgs(const QuantizedMatmulArgs& args) {
  gemm::v1::QuantizedMatmulRequest head;
  wire::QuantizedPayloads payloads;
  if (!args.a_ref.empty()) {
    head.mutable_a_ref()->set_handle(args.a_ref);
  } else if (args.a) {
    SetQuantizedHead(*args.a, head.mutable_a());
    payloads.a_data = InlineData(*args.a);
    payloads.a_scales = InlineScales(*args.a);
  } else if (args.a_dense) {
    SetTensorHead(*args.a_dense, head.mutable_a_dense());
    payloads.a_dense_data = Inline(*args.a_dense);
  }
  if (!args.b_ref.empty()) {
    head.mutable_b_ref()->set_handle(args.b_ref);
  } else {
    SetQuantizedHead(args.b, head.mutable_b());
    payloads.b_data = InlineData(args.b);
    payloads.b_scales = InlineScales(args.b);
  }
  head.set_kernel(args.kernel);
  if (args.keep_c) SetKeep(args.keep_c, head.mutable_keep_c());
  if (args.c_shm.set()) ToProto(args.c_shm, head.mutable_c_shm());
  return wire::EncodeQuantizedMatmulRequest(head, payloads);
}

absl::Status CheckOneA(const QuantizedMatmulArgs& args) {
  if (int{args.a.has_value()} + int{args.a_dense.has_value()} + int{!args.a_ref.empty()} != 1) {
    return absl::InvalidArgumentError(
        "QuantizedMatmulArgs needs exactly one of a, a_dense and a_ref");
  }
  return absl::OkStatus();
}

absl::Status ReadMatmulResponse(const wire::ByteRuns& runs, absl::Span<char> c_out,
                                bool c_in_region, MatmulResult* result) {
  wire::MatmulResponseWire parsed;
  if (absl::Status s = wire::ParseMatmulResponse(runs, &parsed); !s.ok()) {
    return absl::InternalError(s.message());
  }
  const size_t bytes = parsed.c_data.size();
  if (!parsed.head.c_ref().handle().empty()) {
    // C stayed on the server (keep_c): the response describes it and carries no bytes.
    if (bytes != 0) {
      return absl::InternalError("the response has both C's handle and C's bytes");
    }
    result->info_ = std::move(parsed.head);
    result->c_ = absl::string_view();
    return absl::OkStatus();
  }
  if (c_in_region && bytes == 0) {  // C is in the caller's region slice
    result->info_ = std::move(parsed.head);
    result->c_ = absl::string_view();
    return absl::OkStatus();
  }
  const std::optional<DataType> type = DataTypeFromProto(parsed.head.c().dtype());
  int64_t elements = 1;
  for (int64_t d : parsed.head.c().shape()) elements *= d;
  if (!type || static_cast<size_t>(elements) * DataTypeSize(*type) != bytes) {
    return absl::InternalError(absl::StrCat(
        "the response's C has ", bytes, " bytes, which does not match its shape and dtype"));
  }
  char* out = nullptr;
  if (!c_out.empty()) {
    if (c_out.size() < bytes) {
      return absl::InvalidArgumentError(absl::StrCat("C is ", bytes, " bytes; c_out holds ",
                                                     c_out.size()));
    }
    out = c_out.data();
  } else {
    result->owned_.reset(new char[bytes > 0 ? bytes : 1]);  // uninitialized: written below
    out = result->owned_.get();
  }
  CopyRuns(parsed.c_data, out);
  result->info_ = std::move(parsed.head);
  result->c_ = absl::string_view(out, bytes);
  return absl::OkStatus();
}

}  // namespace gemmd
