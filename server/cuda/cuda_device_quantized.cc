// CudaDevice's QuantizedMatmul path: the packed operands go to the GPU as they came on
// the wire (0.5625 bytes per NVFP4 value, 1 per INT8 value, plus scales) and the
// quantized kernels decode them there; the host only dequantizes a quantized A for the
// skinny kernel (at most 64 rows).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/cuda/quant_square.h"
#include "kernels/quant_formats.h"
#include "server/cuda/cuda_device.h"
#include "server/cuda/cuda_device_internal.h"
#include "server/quantized_plan.h"
#include "server/quantized_validation.h"

namespace gemmd {
namespace {

using cuda_device_internal::AlignUp;

// One quantized kernel the device offers: its family, the weight format it decodes and,
// for the square ones, mma.sync or wgmma.
struct QuantizedKernel {
  std::string name;
  QuantizedPath path;
  QuantFormat format;
  gpu::SquareMmaPath mma;
};

std::vector<QuantizedKernel> KernelTable(bool wgmma) {
  std::vector<QuantizedKernel> table = {
      {"skinny_int8_mma16816", QuantizedPath::kSkinny, QuantFormat::kInt8,
       gpu::SquareMmaPath::kAuto},
      {"skinny_nvfp4_mma16816", QuantizedPath::kSkinny, QuantFormat::kNvfp4,
       gpu::SquareMmaPath::kAuto}};
  std::vector<gpu::SquareMmaPath> square = {gpu::SquareMmaPath::kMmaSync};
  if (wgmma) square.insert(square.begin(), gpu::SquareMmaPath::kWgmma);  // preferred first
  for (gpu::SquareMmaPath mma : square) {
    table.push_back({gpu::SquareKernelName(QuantFormat::kInt8, false, mma), QuantizedPath::kSquare,
                     QuantFormat::kInt8, mma});
    table.push_back({gpu::SquareKernelName(QuantFormat::kNvfp4, false, mma),
                     QuantizedPath::kSquare, QuantFormat::kNvfp4, mma});
    table.push_back({gpu::SquareKernelName(QuantFormat::kNvfp4, true, mma),
                     QuantizedPath::kSquareFp16A, QuantFormat::kNvfp4, mma});
  }
  return table;
}

const QuantizedKernel* FindKernel(const std::vector<QuantizedKernel>& table,
                                  absl::string_view name) {
  for (const QuantizedKernel& k : table) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> CudaDevice::QuantizedKernels() const {
  std::vector<std::string> names;
  for (const QuantizedKernel& k : KernelTable(wgmma_)) names.push_back(k.name);
  return names;
}

absl::StatusOr<std::string> CudaDevice::SelectQuantizedKernel(
    const QuantizedOperands& operands, absl::string_view forced_kernel) const {
  const std::vector<QuantizedKernel> table = KernelTable(wgmma_);
  if (forced_kernel.empty()) {
    const QuantizedPath path = PlanQuantized(operands);
    if (path == QuantizedPath::kHostDequantize) return std::string();
    for (const QuantizedKernel& k : table) {  // the table lists the preferred one first
      if (k.path == path && k.format == operands.b.format) return k.name;
    }
    return std::string();
  }
  const QuantizedKernel* k = FindKernel(table, forced_kernel);
  if (k == nullptr) return std::string();  // a dense kernel's name: the host path
  if (k->format != operands.b.format) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel ", k->name, " decodes ", QuantFormatName(k->format), " weights; b is ",
        QuantFormatName(operands.b.format)));
  }
  if (absl::Status s = QuantizedPathTakes(k->path, operands); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("kernel ", k->name, ": ", s.message()));
  }
  return k->name;
}

absl::Status CudaDevice::RunQuantized(const Job& job, Lane& lane, int lane_index,
                                      BatchRun* run) {
  const QuantizedOperands& q = *job.quantized;
  // The kernel SelectQuantizedKernel chose when the request came in.
  const std::vector<QuantizedKernel> table = KernelTable(wgmma_);
  const QuantizedKernel* kernel = FindKernel(table, job.forced_kernel);
  if (kernel == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no quantized kernel named '", job.forced_kernel, "' on this device"));
  }
  const QuantizedPath path = kernel->path;
  if (absl::Status s = QuantizedPathTakes(path, q); !s.ok()) return s;
  if (job.operands.c_out == nullptr) {
    return absl::InvalidArgumentError("quantized job without a result buffer");
  }
  const absl::Time copy_start = absl::Now();

  // A as the kernel reads it: the skinny kernel takes dense FP16/FP32/BF16 (a quantized A is
  // dequantized here, it has at most 64 rows), the square kernels the packed bytes.
  std::vector<float> a_host;
  const void* a_bytes = q.a_dense.data();
  int64_t a_size = static_cast<int64_t>(q.a_dense.size());
  DataType a_type = q.a_dense_type;
  if (path == QuantizedPath::kSkinny && q.a.has_value()) {
    a_host.resize(static_cast<size_t>(q.m * q.k));
    if (absl::Status s = DequantizeOperand(*q.a, q.m, q.k, a_host.data()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("a: ", s.message()));
    }
    a_bytes = a_host.data();
    a_size = static_cast<int64_t>(a_host.size() * sizeof(float));
    a_type = DataType::kFloat32;
  } else if (path == QuantizedPath::kSquare) {
    a_bytes = q.a->data.data();
    a_size = static_cast<int64_t>(q.a->data.size());
  }
  const bool a_scales = path == QuantizedPath::kSquare;
  const size_t workspace_bytes =
      path == QuantizedPath::kSkinny ? gpu::SkinnyQuantizedWorkspaceBytes(a_type, q.m, q.k) : 0;

  // Arena: A | A scales | B codes | B scales | C | workspace, 256-byte aligned regions.
  const int64_t a_at = 0;
  const int64_t a_scales_at = AlignUp(a_at + a_size);
  const int64_t b_at = AlignUp(a_scales_at + (a_scales ? q.a->scales.size() : 0));
  const int64_t b_scales_at = AlignUp(b_at + static_cast<int64_t>(q.b.data.size()));
  const int64_t c_at = AlignUp(b_scales_at + static_cast<int64_t>(q.b.scales.size()));
  const int64_t c_bytes = q.m * q.n * static_cast<int64_t>(sizeof(float));
  const int64_t workspace_at = AlignUp(c_at + c_bytes);
  absl::StatusOr<void*> acquired =
      pool_->Acquire(lane_index, workspace_at + static_cast<int64_t>(workspace_bytes));
  if (!acquired.ok()) {
    if (acquired.status().code() == absl::StatusCode::kInternal) return Fault(acquired.status());
    return acquired.status();  // RESOURCE_EXHAUSTED: the device is fine
  }
  char* arena = static_cast<char*>(*acquired);

  std::vector<HostToDevice> in = {{a_bytes, arena + a_at, static_cast<size_t>(a_size)}};
  if (a_scales) in.push_back({q.a->scales.data(), arena + a_scales_at, q.a->scales.size()});
  in.push_back({q.b.data.data(), arena + b_at, q.b.data.size()});
  in.push_back({q.b.scales.data(), arena + b_scales_at, q.b.scales.size()});
  const cudaStream_t stream = lane.stream.get();
  GEMMD_FAULT_IF_ERROR(lane.staging->CopyIn(in, stream));
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(stream)));
  run->copy_in = absl::Now() - copy_start;

  run->kernel = kernel->name;
  const gpu::DeviceQuantizedWeight b{q.b.format, arena + b_at, arena + b_scales_at,
                                     q.b.tensor_scale, q.n, q.k};
  float* c = reinterpret_cast<float*>(arena + c_at);
  const absl::Time compute_start = absl::Now();
  absl::Status launched;
  switch (path) {
    case QuantizedPath::kSkinny:
      launched = gpu::LaunchSkinnyQuantizedGemm(arena + a_at, a_type, q.m, b, c,
                                                workspace_bytes > 0 ? arena + workspace_at
                                                                    : nullptr,
                                                workspace_bytes, stream);
      break;
    case QuantizedPath::kSquare: {
      const gpu::DeviceQuantizedWeight a{q.a->format, arena + a_at, arena + a_scales_at,
                                         q.a->tensor_scale, q.m, q.k};
      launched = gpu::LaunchSquareQuantizedGemm(a, b, c, stream, kernel->mma);
      break;
    }
    case QuantizedPath::kSquareFp16A:
      launched = gpu::LaunchSquareFp16Nvfp4Gemm(arena + a_at, q.m, q.k, b, c, stream, kernel->mma);
      break;
    case QuantizedPath::kHostDequantize:
      break;
  }
  if (!launched.ok()) {
    // INTERNAL is a CUDA error; the rest are the kernel's checks of the operands.
    if (launched.code() == absl::StatusCode::kInternal) return Fault(launched);
    return launched;
  }
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(stream)));
  run->compute = absl::Now() - compute_start;

  const absl::Time out_start = absl::Now();
  GEMMD_FAULT_IF_ERROR(
      lane.staging->CopyOut({{c, job.operands.c_out, static_cast<size_t>(c_bytes)}}, stream));
  run->copy_out = absl::Now() - out_start;
  return absl::OkStatus();
}

}  // namespace gemmd
