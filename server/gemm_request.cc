#include "server/gemm_request.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/client_text.h"
#include "server/quantized_validation.h"

namespace gemmd {
namespace {

std::vector<std::string> DenseKernelNames(const Device& device) {
  std::vector<std::string> names;
  for (const KernelDescription& k : device.Kernels()) names.push_back(k.name);
  return names;
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

absl::Status CheckKernelName(const Device& device, RpcMethod method, const std::string& name) {
  if (name.empty()) return absl::OkStatus();
  const std::vector<std::string> dense = DenseKernelNames(device);
  const std::vector<std::string> quantized = device.QuantizedKernels();
  const bool is_dense = Contains(dense, name);
  const bool is_quantized = Contains(quantized, name);
  if (method == RpcMethod::kMatmul && is_quantized && !is_dense) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", name,
                     " is a QuantizedMatmul kernel (it multiplies quantized weights); Matmul "
                     "kernels here: ",
                     absl::StrJoin(dense, ", ")));
  }
  if (is_dense || is_quantized) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "no kernel named '", ClientText(name), "' on this server; Matmul kernels: ",
      absl::StrJoin(dense, ", "), "; QuantizedMatmul kernels: ",
      quantized.empty() ? std::string("none") : absl::StrJoin(quantized, ", ")));
}

absl::StatusOr<PreparedGemm> PrepareMatmul(const gemm::v1::MatmulRequest& request,
                                           const GemmRequestContext& context,
                                           PrecisionLabel* label) {
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(request, context.limits);
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->problem.precision);
  if (absl::Status s = CheckKernelName(*context.device, RpcMethod::kMatmul, v->kernel); !s.ok()) {
    return s;
  }
  // The device picks the kernel again for the whole batch; this catches, before
  // queueing, a request no kernel here can run.
  absl::StatusOr<std::string> kernel = context.device->SelectKernel(v->problem, v->kernel);
  if (!kernel.ok()) return kernel.status();

  PreparedGemm g;
  g.problem = v->problem;
  g.operands = v->operands;  // point into the request, which outlives the job
  g.forced_kernel = v->kernel;
  g.output_shape = v->output_shape;
  g.input_bytes = v->input_bytes;
  g.output_bytes = v->output_bytes;
  return g;
}

absl::StatusOr<PreparedGemm> PrepareQuantizedMatmul(
    const gemm::v1::QuantizedMatmulRequest& request, const GemmRequestContext& context,
    PrecisionLabel* label) {
  absl::StatusOr<ValidatedQuantized> v = ValidateQuantizedMatmul(request, context.limits);
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->b_format);
  if (absl::Status s =
          CheckKernelName(*context.device, RpcMethod::kQuantizedMatmul, v->kernel);
      !s.ok()) {
    return s;
  }
  PreparedGemm g;
  // The FP32 equivalent, C = A * B^T with B stored [N, K]: what placement (FLOPs) and the
  // host path use.
  g.problem.m = v->m;
  g.problem.n = v->n;
  g.problem.k = v->k;
  g.problem.transpose_b = true;
  g.problem.precision = Precision::kFp32;
  g.forced_kernel = v->kernel;
  g.output_shape = {v->m, v->n};
  g.input_bytes = v->input_bytes;
  g.output_bytes = v->output_bytes;

  // A device with quantized kernels takes the packed bytes as they are (unless the request
  // forces a dense kernel); validation has checked every scale byte already.
  QuantizedOperands packed = PackedOperands(request, *v);
  absl::StatusOr<std::string> quantized_kernel =
      context.device->SelectQuantizedKernel(packed, v->kernel);
  if (!quantized_kernel.ok()) return quantized_kernel.status();
  if (!quantized_kernel->empty()) {
    g.forced_kernel = *quantized_kernel;
    g.quantized = std::make_shared<const QuantizedOperands>(std::move(packed));
    return g;
  }

  // Otherwise dequantize to FP32 (validated sizes only) and run the FP32 GEMM. The kernel
  // must exist for the FP32 problem, and the FP32 operands must fit the memory cap,
  // before anything is allocated.
  absl::StatusOr<std::string> kernel = context.device->SelectKernel(g.problem, v->kernel);
  if (!kernel.ok()) return kernel.status();
  const int64_t floats = (v->m + v->n) * v->k;
  absl::StatusOr<Reservation> reserved = context.memory->Reserve(floats * 4);
  if (!reserved.ok()) return reserved.status();
  g.scratch_reservation = *std::move(reserved);
  // Allocating and dequantizing is host work on the operands: it counts as copy-in.
  // (No zero-fill: dequantizing writes every element.)
  const absl::Time prepare_start = absl::Now();
  std::shared_ptr<float[]> operands(new float[static_cast<size_t>(floats)]);
  float* a = operands.get();
  float* b = a + v->m * v->k;
  if (absl::Status s = DequantizeOperands(request, *v, a, b); !s.ok()) return s;
  g.prepare = absl::Now() - prepare_start;
  g.operands = {a, b, nullptr, nullptr};
  g.scratch = std::move(operands);
  return g;
}

}  // namespace gemmd
