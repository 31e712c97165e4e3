#include "client_cli/request_args.h"

namespace gemmd {
namespace {

TensorRef RefOf(const gemm::v1::Tensor& t) {
  return {{t.shape().begin(), t.shape().end()}, t.dtype(), t.data()};
}

QuantizedTensorRef RefOf(const gemm::v1::QuantizedTensor& t) {
  return {{t.shape().begin(), t.shape().end()}, t.format(), t.data(), t.scales(), t.tensor_scale()};
}

}  // namespace

MatmulArgs ArgsOf(const gemm::v1::MatmulRequest& r) {
  MatmulArgs args;
  args.a = RefOf(r.a());
  args.b = RefOf(r.b());
  if (r.has_c()) args.c = RefOf(r.c());
  if (r.has_alpha()) args.alpha = r.alpha();
  args.beta = r.beta();
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
  args.b = RefOf(r.b());
  args.kernel = r.kernel();
  return args;
}

}  // namespace gemmd
