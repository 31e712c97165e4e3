#include "client_cli/request_args.h"

namespace gemmd {
namespace {

TensorRef RefOf(const gemm::v1::Tensor& t) {
  return {{t.shape().begin(), t.shape().end()}, t.dtype(), t.data()};
}

QuantizedTensorRef RefOf(const gemm::v1::QuantizedTensor& t) {
  return {{t.shape().begin(), t.shape().end()}, t.format(), t.data(), t.scales(), t.tensor_scale()};
}

std::optional<KeepResult> KeepOf(bool has, const gemm::v1::ResidentResult& keep) {
  if (!has) return std::nullopt;
  return KeepResult{keep.ttl_s(), keep.label()};
}

}  // namespace

MatmulArgs ArgsOf(const gemm::v1::MatmulRequest& r) {
  MatmulArgs args;
  args.a = RefOf(r.a());
  args.b = RefOf(r.b());
  if (r.has_c()) args.c = RefOf(r.c());
  args.a_ref = r.a_ref().handle();
  args.b_ref = r.b_ref().handle();
  args.c_ref = r.c_ref().handle();
  args.keep_c = KeepOf(r.has_keep_c(), r.keep_c());
  if (r.has_alpha_f64()) {
    args.alpha = r.alpha_f64();
  } else if (r.has_alpha()) {
    args.alpha = r.alpha();
  }
  args.beta = r.has_beta_f64() ? r.beta_f64() : r.beta();
  args.transpose_a = r.transpose_a();
  args.transpose_b = r.transpose_b();
  args.precision = r.precision();
  args.output_dtype = r.output_dtype();
  args.kernel = r.kernel();
  return args;
}

QuantizedMatmulArgs ArgsOf(const gemm::v1::QuantizedMatmulRequest& r) {
  QuantizedMatmulArgs args;
  if (r.has_a()) args.a = RefOf(r.a());
  if (r.has_a_dense()) args.a_dense = RefOf(r.a_dense());
  args.a_ref = r.a_ref().handle();
  args.b = RefOf(r.b());
  args.b_ref = r.b_ref().handle();
  args.kernel = r.kernel();
  args.keep_c = KeepOf(r.has_keep_c(), r.keep_c());
  return args;
}

}  // namespace gemmd
