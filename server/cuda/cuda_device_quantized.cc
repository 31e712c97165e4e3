// CudaDevice's QuantizedMatmul path: the packed operands go to the GPU as they came on
// the wire (0.5625 bytes per NVFP4 value, 1 per INT8 value, plus scales) and the
// quantized kernels decode them there; the host only dequantizes a quantized A for the
// skinny kernel (at most 64 rows).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/cuda/quant_square.h"
#include "kernels/quant_formats.h"
#include "server/cuda/cuda_device.h"
#include "server/cuda/cuda_device_errors.h"
#include "server/quantized_plan.h"

namespace gemmd {
namespace {

constexpr int64_t kAlignment = 256;  // region starts: what the kernels' vector loads need

int64_t AlignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// A quantized operand as a host-side dequantized FP32 matrix [rows, k].
absl::Status DequantizeOnHost(const QuantizedOperand& op, int64_t rows, int64_t k,
                              std::vector<float>* out) {
  out->resize(static_cast<size_t>(rows * k));
  if (op.format == QuantFormat::kInt8) {
    std::vector<float> scales(static_cast<size_t>(rows));
    std::memcpy(scales.data(), op.scales.data(), scales.size() * sizeof(float));
    DequantizeInt8(reinterpret_cast<const int8_t*>(op.data.data()), scales.data(), rows, k,
                   out->data());
    return absl::OkStatus();
  }
  return DequantizeNvfp4(reinterpret_cast<const uint8_t*>(op.data.data()),
                         reinterpret_cast<const uint8_t*>(op.scales.data()), op.tensor_scale,
                         rows, k, out->data());
}

const char* SkinnyKernelName(QuantFormat format) {
  return format == QuantFormat::kInt8 ? "skinny_int8_mma16816" : "skinny_nvfp4_mma16816";
}

}  // namespace

bool CudaDevice::RunsQuantized(const QuantizedOperands& operands) const {
  return PlanQuantized(operands) != QuantizedPath::kHostDequantize;
}

absl::Status CudaDevice::RunQuantized(const Job& job, Lane& lane, int lane_index,
                                      BatchRun* run) {
  const QuantizedOperands& q = *job.quantized;
  const QuantizedPath path = PlanQuantized(q);
  if (path == QuantizedPath::kHostDequantize) {
    return absl::FailedPreconditionError(
        "no quantized kernel on this device takes these operands (the server dequantizes)");
  }
  if (job.operands.c_out == nullptr) {
    return absl::InvalidArgumentError("quantized job without a result buffer");
  }
  const absl::Time copy_start = absl::Now();

  // A as the kernel reads it: the skinny kernel takes dense FP16/FP32 (a quantized A is
  // dequantized here, it has at most 64 rows), the square kernels the packed bytes.
  std::vector<float> a_host;
  const void* a_bytes = q.a_dense.data();
  int64_t a_size = static_cast<int64_t>(q.a_dense.size());
  DataType a_type = q.a_dense_type;
  if (path == QuantizedPath::kSkinny && q.a.has_value()) {
    if (absl::Status s = DequantizeOnHost(*q.a, q.m, q.k, &a_host); !s.ok()) {
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

  const gpu::DeviceQuantizedWeight b{q.b.format, arena + b_at, arena + b_scales_at,
                                     q.b.tensor_scale, q.n, q.k};
  float* c = reinterpret_cast<float*>(arena + c_at);
  const absl::Time compute_start = absl::Now();
  absl::Status launched;
  switch (path) {
    case QuantizedPath::kSkinny:
      run->kernel = SkinnyKernelName(q.b.format);
      launched = gpu::LaunchSkinnyQuantizedGemm(arena + a_at, a_type, q.m, b, c,
                                                workspace_bytes > 0 ? arena + workspace_at
                                                                    : nullptr,
                                                workspace_bytes, stream);
      break;
    case QuantizedPath::kSquare: {
      const gpu::DeviceQuantizedWeight a{q.a->format, arena + a_at, arena + a_scales_at,
                                         q.a->tensor_scale, q.m, q.k};
      run->kernel = gpu::SquareKernelName(q.b.format, false, gpu::SquareMmaPath::kAuto);
      launched = gpu::LaunchSquareQuantizedGemm(a, b, c, stream);
      break;
    }
    case QuantizedPath::kSquareFp16A:
      run->kernel = gpu::SquareKernelName(q.b.format, true, gpu::SquareMmaPath::kAuto);
      launched = gpu::LaunchSquareFp16Nvfp4Gemm(arena + a_at, q.m, q.k, b, c, stream);
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
