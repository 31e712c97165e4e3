#include "server/rpc/gemm_request.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/rpc/client_text.h"
#include "server/rpc/quantized_validation.h"

namespace gemmd {

absl::Status CheckKernelName(const KernelCatalogue& catalogue, RpcMethod method,
                             std::string_view name) {
  if (name.empty()) return absl::OkStatus();
  std::vector<std::string> dense, quantized;
  bool is_dense = false, is_quantized = false;
  for (const KernelDescription& k : catalogue.Kernels()) {
    const bool q = k.input == KernelInput::kQuantized;
    (q ? quantized : dense).push_back(k.name);
    (q ? is_quantized : is_dense) |= k.name == name;
  }
  if (method == RpcMethod::kMatmul && is_quantized && !is_dense) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", std::string(name),
                     " is a QuantizedMatmul kernel (it multiplies quantized weights); Matmul "
                     "kernels here: ",
                     absl::StrJoin(dense, ", ")));
  }
  if (is_dense || is_quantized) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "no kernel named '", ClientText(absl::string_view(name.data(), name.size())),
      "' on this server; Matmul kernels: ",
      absl::StrJoin(dense, ", "), "; QuantizedMatmul kernels: ",
      quantized.empty() ? std::string("none") : absl::StrJoin(quantized, ", ")));
}

absl::Status PrepareMatmul(const GemmRequestContext& context, GemmRequest* r,
                           PrecisionLabel* label) {
  const auto& message = static_cast<const gemm::v1::MatmulRequest&>(*r->message);
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(message, context.limits);
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->problem.precision);
  if (absl::Status s = CheckKernelName(*context.catalogue, RpcMethod::kMatmul, v->kernel);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<const Kernel*> kernel = context.catalogue->Select(v->problem, v->kernel);
  if (!kernel.ok()) return kernel.status();
  r->kernel = *kernel;
  r->problem = v->problem;
  r->operands = v->operands;  // point into the message, which the request owns
  r->output_shape = std::move(v->output_shape);
  r->input_bytes = v->input_bytes;
  r->output_bytes = v->output_bytes;
  return absl::OkStatus();
}

absl::Status PrepareQuantizedMatmul(const GemmRequestContext& context, GemmRequest* r,
                                    PrecisionLabel* label) {
  const auto& message = static_cast<const gemm::v1::QuantizedMatmulRequest&>(*r->message);
  absl::StatusOr<ValidatedQuantized> v = ValidateQuantizedMatmul(message, context.limits);
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->b_format);
  if (absl::Status s =
          CheckKernelName(*context.catalogue, RpcMethod::kQuantizedMatmul, v->kernel);
      !s.ok()) {
    return s;
  }
  // The FP32 equivalent, C = A * B^T with B stored [N, K]: what placement (FLOPs) and the
  // host path use.
  r->problem.m = v->m;
  r->problem.n = v->n;
  r->problem.k = v->k;
  r->problem.transpose_b = true;
  r->problem.precision = Precision::kFp32;
  r->output_shape = {v->m, v->n};
  r->input_bytes = v->input_bytes;
  r->output_bytes = v->output_bytes;

  // A backend with quantized kernels takes the packed bytes as they are (unless the
  // request forces a dense kernel); validation has checked every scale byte already.
  r->packed = PackedOperands(message, *v);
  absl::StatusOr<QuantizedChoice> choice =
      context.catalogue->SelectQuantized(r->packed, v->kernel);
  if (!choice.ok()) return choice.status();
  const bool dequantize_a = choice->kernel != nullptr && choice->dense_a && r->packed.a;
  if (choice->kernel != nullptr && !dequantize_a) {
    r->kernel = choice->kernel;
    r->quantized = &r->packed;
    return absl::OkStatus();
  }
  // Otherwise dequantize on the host: A alone for a kernel that reads A dense (at most
  // 64 rows), or both operands to FP32 for the FP32 GEMM, whose kernel must exist before
  // anything is allocated. Either way the memory is reserved first.
  if (!dequantize_a) {
    absl::StatusOr<const Kernel*> kernel = context.catalogue->Select(r->problem, v->kernel);
    if (!kernel.ok()) return kernel.status();
    r->kernel = *kernel;
  }
  const int64_t floats = (v->m + (dequantize_a ? 0 : v->n)) * v->k;
  absl::StatusOr<Reservation> reserved = context.memory->Reserve(floats * 4);
  if (!reserved.ok()) return reserved.status();
  r->scratch_reservation = *std::move(reserved);
  // No zero-fill: dequantizing writes every element.
  const absl::Time prepare_start = absl::Now();
  r->scratch.reset(new float[static_cast<size_t>(floats)]);
  float* a = r->scratch.get();
  if (dequantize_a) {
    if (absl::Status s = DequantizeOperand(*r->packed.a, v->m, v->k, a); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("a: ", s.message()));
    }
    r->packed.a.reset();
    r->packed.a_dense_type = DataType::kFloat32;
    r->packed.a_dense = absl::string_view(reinterpret_cast<const char*>(a),
                                          static_cast<size_t>(v->m * v->k) * sizeof(float));
    r->kernel = choice->kernel;
    r->quantized = &r->packed;
  } else {
    float* b = a + v->m * v->k;
    if (absl::Status s = DequantizeOperands(message, *v, a, b); !s.ok()) return s;
    r->operands = {a, b, nullptr, nullptr};
  }
  r->prepare = absl::Now() - prepare_start;
  return absl::OkStatus();
}

}  // namespace gemmd
