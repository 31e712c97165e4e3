#include "kernels/cpu/cpu_kernels.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/cpu_quantized_gemm.h"

namespace gemmd {
namespace {

// cpu_sgemm_openblas, cpu_hgemm_emulated_openblas and cpu_dgemm_openblas: CpuGemm at one
// precision.
class CpuDenseKernel final : public CpuKernel {
 public:
  CpuDenseKernel(const char* name, Precision precision) : name_(name), precision_(precision) {}
  std::string_view name() const override { return name_; }
  KernelInput input() const override { return KernelInput::kDense; }
  Precision precision() const override { return precision_; }

  absl::Status Check(const GemmProblem& problem) const override {
    if (problem.precision == precision_) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("kernel ", name_, " computes ",
                                                      PrecisionName(precision_),
                                                      " but the request asks for ",
                                                      PrecisionName(problem.precision)));
  }
  absl::Status Check(const QuantizedOperands&) const override {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", name_, " is a Matmul kernel (dense operands)"));
  }
  absl::Status Run(const GemmProblem& problem, const GemmOperands& host) const override {
    return CpuGemm(problem, host);
  }
  absl::Status Run(const QuantizedOperands&, float*) const override {
    return absl::FailedPreconditionError(absl::StrCat("kernel ", name_, " is a Matmul kernel"));
  }

 private:
  const char* const name_;
  const Precision precision_;
};

// cpu_weight_only_sgemm_openblas: CpuWeightOnlyGemm from the packed weight.
class CpuWeightOnlyKernel final : public CpuKernel {
 public:
  std::string_view name() const override { return kCpuWeightOnlyKernel; }
  KernelInput input() const override { return KernelInput::kQuantized; }
  Precision precision() const override { return Precision::kFp32; }

  absl::Status Check(const GemmProblem&) const override {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", kCpuWeightOnlyKernel, " is a QuantizedMatmul kernel"));
  }
  absl::Status Check(const QuantizedOperands& q) const override {
    if (!q.a.has_value()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel ", kCpuWeightOnlyKernel, " takes a dense A (weight-only quantization); a is ",
        QuantFormatName(q.a->format)));
  }
  // A dense A that is not FP32 is widened to FP32 once.
  int64_t HostWorkspaceBytes(const QuantizedOperands& q) const override {
    if (q.a.has_value() || q.a_dense_type == DataType::kFloat32) return 0;
    return q.m * q.k * static_cast<int64_t>(sizeof(float));
  }
  absl::Status Run(const GemmProblem&, const GemmOperands&) const override {
    return Check(GemmProblem());
  }
  absl::Status Run(const QuantizedOperands& q, float* c) const override {
    if (absl::Status s = Check(q); !s.ok()) return s;
    if (c == nullptr) return absl::InvalidArgumentError("quantized job without a result buffer");
    const PackedWeight b{q.b.format, q.b.data.data(), q.b.scales.data(), q.b.tensor_scale, q.n,
                         q.k};
    return CpuWeightOnlyGemm(q.a_dense.data(), q.a_dense_type, q.m, b, c);
  }
};

const CpuDenseKernel kSgemm(kCpuSgemmKernel, Precision::kFp32);
const CpuDenseKernel kTensor(kCpuTensorKernel, Precision::kFp16Tensor);
const CpuDenseKernel kDgemm(kCpuDgemmKernel, Precision::kFp64);
const CpuWeightOnlyKernel kWeightOnly;

}  // namespace

const std::vector<const CpuKernel*>& CpuKernels() {
  static const std::vector<const CpuKernel*>* const kernels =
      new std::vector<const CpuKernel*>{&kSgemm, &kTensor, &kDgemm, &kWeightOnly};
  return *kernels;
}

const CpuKernel* FindCpuKernel(std::string_view name) {
  for (const CpuKernel* k : CpuKernels()) {
    if (k->name() == name) return k;
  }
  return nullptr;
}

const CpuKernel& SelectCpuKernel(const GemmProblem& problem) {
  switch (problem.precision) {
    case Precision::kFp32:
      return kSgemm;
    case Precision::kFp64:
      return kDgemm;
    case Precision::kFp16Tensor:
      break;
  }
  return kTensor;
}

const CpuKernel* SelectCpuQuantizedKernel(const QuantizedOperands& q) {
  return q.a.has_value() ? nullptr : &kWeightOnly;
}

}  // namespace gemmd
