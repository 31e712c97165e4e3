// The quantized catalogue entries: each wraps its family's launcher (quant_gemm.h,
// quant_square.h) with the checks that say, before any operand is placed, whether it
// runs a request on a device.
#include "kernels/cuda/quantized/quantized_kernels.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/quantized/nvfp4_expand.h"
#include "kernels/cuda/quantized/quant_gemm.h"
#include "kernels/cuda/quantized/quant_skinny_stream.h"
#include "kernels/cuda/quantized/quant_square.h"
#include "kernels/cuda/quantized/quant_swapab.h"

namespace gemmd::gpu {
namespace {

DeviceQuantizedWeight OnDevice(const QuantizedOperand& x, const void* data, const void* scales,
                               int64_t rows, int64_t k) {
  return DeviceQuantizedWeight{x.format, data, scales, x.tensor_scale, rows, k};
}

// A request's reason not to run here, whatever the launcher's code for it.
absl::Status NotHere(const absl::Status& s) {
  return s.ok() ? s : absl::FailedPreconditionError(s.message());
}

class SkinnyKernel final : public QuantizedGemmKernel {
 public:
  SkinnyKernel(QuantFormat format, SkinnyPath path)
      : format_(format), path_(path), name_(SkinnyKernelName(format, path)) {}
  std::string_view name() const override { return name_; }
  QuantizedFamily family() const override { return QuantizedFamily::kSkinny; }
  int min_compute_capability() const override { return 80; }  // mma.sync m16n8k16
  QuantFormat format() const override { return format_; }
  bool reads_packed_a() const override { return false; }

  absl::Status Check(const QuantizedOperands& q, const DeviceCaps& caps) const override {
    const DataType a_type = DenseA(q);
    const DeviceQuantizedWeight b = PlacedWeight(q.b, q.n, q.k);
    if (absl::Status s = CheckSkinnyOperands(a_type, q.m, b); !s.ok()) return NotHere(s);
    switch (path_) {
      case SkinnyPath::kRing:
        return SkinnyRingRuns(kArenaAligned, a_type, q.m, b,
                              caps.shared_memory_per_block_optin_bytes);
      case SkinnyPath::kStream:
        if (a_type != DataType::kFloat16 && a_type != DataType::kBFloat16) {
          return absl::FailedPreconditionError(
              "the streaming skinny kernel takes FLOAT16 or BFLOAT16 activations");
        }
        return SkinnyStreamFits(q.m, b, /*fill_required=*/false);
      default:
        return absl::OkStatus();
    }
  }

  size_t WorkspaceBytes(const QuantizedOperands& q) const override {
    return SkinnyQuantizedWorkspaceBytes(DenseA(q), q.m, q.k);
  }

  absl::Status Launch(const QuantizedOperands& q, const QuantizedDeviceOperands& d,
                      void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) const override {
    SkinnyQuantizedTuning tuning;
    tuning.path = path_;
    return LaunchSkinnyQuantizedGemm(d.a, DenseA(q), q.m, OnDevice(q.b, d.b, d.b_scales, q.n, q.k),
                                     d.c, workspace, workspace_bytes, stream, tuning);
  }

 private:
  const QuantFormat format_;
  const SkinnyPath path_;
  const std::string name_;
};

// Both operands quantized in one format (fp16_a = false), or dense FP16 A against NVFP4
// B (fp16_a = true); mma.sync or wgmma.
class SquareKernel final : public QuantizedGemmKernel {
 public:
  SquareKernel(QuantFormat format, bool fp16_a, SquareMmaPath mma)
      : format_(format), fp16_a_(fp16_a), mma_(mma), name_(SquareKernelName(format, fp16_a, mma)) {}
  std::string_view name() const override { return name_; }
  QuantizedFamily family() const override {
    return fp16_a_ ? QuantizedFamily::kSquareFp16A : QuantizedFamily::kSquare;
  }
  int min_compute_capability() const override { return mma_ == SquareMmaPath::kWgmma ? 90 : 80; }
  QuantFormat format() const override { return format_; }
  bool reads_packed_a() const override { return !fp16_a_; }
  bool RunsOn(int compute_capability) const override {
    return mma_ == SquareMmaPath::kWgmma ? SquareWgmmaRuns(compute_capability)
                                         : compute_capability >= 80;
  }

  absl::Status Check(const QuantizedOperands& q, const DeviceCaps& caps) const override {
    if (mma_ == SquareMmaPath::kWgmma && !SquareWgmmaRuns(caps.compute_capability)) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, " needs a build with sm_90a and a compute capability 9.0 device"));
    }
    const DeviceQuantizedWeight b = PlacedWeight(q.b, q.n, q.k);
    if (fp16_a_) {
      if (q.a.has_value() || q.a_dense_type != DataType::kFloat16 ||
          q.b.format != QuantFormat::kNvfp4) {
        return absl::FailedPreconditionError(
            "the FP16 x NVFP4 kernel takes a dense FLOAT16 A and an NVFP4 B");
      }
      return NotHere(SupportsSquareFp16Nvfp4Gemm(kArenaAligned, q.m, q.k, b));
    }
    if (!q.a.has_value() || q.a->format != q.b.format) {
      return absl::FailedPreconditionError(
          "the square kernel takes A and B quantized in the same format");
    }
    return NotHere(SupportsSquareQuantizedGemm(PlacedWeight(*q.a, q.m, q.k), b));
  }

  size_t WorkspaceBytes(const QuantizedOperands&) const override { return 0; }

  absl::Status Launch(const QuantizedOperands& q, const QuantizedDeviceOperands& d,
                      void* /*workspace*/, size_t /*workspace_bytes*/,
                      cudaStream_t stream) const override {
    const DeviceQuantizedWeight b = OnDevice(q.b, d.b, d.b_scales, q.n, q.k);
    if (fp16_a_) return LaunchSquareFp16Nvfp4Gemm(d.a, q.m, q.k, b, d.c, stream, mma_);
    return LaunchSquareQuantizedGemm(OnDevice(*q.a, d.a, d.a_scales, q.m, q.k), b, d.c, stream,
                                     mma_);
  }

 private:
  const QuantFormat format_;
  const bool fp16_a_;
  const SquareMmaPath mma_;
  const std::string name_;
};

// FP16 A (or, nvfp4_a, NVFP4 A against NVFP4 B; wgmma only) against a weight in the
// swap-AB layout (quant_swapab.h): on wgmma any rows, and a canonical weight too (the
// launch packs a copy into the workspace); on mma.sync 1-64 rows of a resident weight the
// store re-laid out. NVFP4 A is expanded to FP16 in the workspace first.

class SwapAbKernel final : public QuantizedGemmKernel {
 public:
  SwapAbKernel(QuantFormat format, SwapAbPath path, bool nvfp4_a = false)
      : format_(format),
        path_(path),
        nvfp4_a_(nvfp4_a),
        name_(nvfp4_a ? "swapab_nvfp4xnvfp4_wgmma"
                      : SwapAbKernelName(format == QuantFormat::kInt8, path)) {}
  std::string_view name() const override { return name_; }
  QuantizedFamily family() const override { return QuantizedFamily::kSwapAb; }
  int min_compute_capability() const override { return path_ == SwapAbPath::kWgmma ? 90 : 80; }
  QuantFormat format() const override { return format_; }
  bool reads_packed_a() const override { return nvfp4_a_; }
  WeightLayout b_layout() const override { return WeightLayout::kSwapAb; }
  bool RunsOn(int compute_capability) const override {
    return path_ == SwapAbPath::kWgmma ? SwapAbWgmmaBuilt() && compute_capability == 90
                                       : compute_capability >= 80;
  }

  absl::Status Check(const QuantizedOperands& q, const DeviceCaps& caps) const override {
    if (!RunsOn(caps.compute_capability)) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_, path_ == SwapAbPath::kWgmma
                                  ? " needs a build with sm_90a and a compute capability 9.0 device"
                                  : " needs compute capability 8.0 or later"));
    }
    if (q.b.layout != WeightLayout::kSwapAb && path_ != SwapAbPath::kWgmma) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_,
                       " reads a resident weight kept in the swap-AB layout "
                       "(--quantized_layout); this one is ",
                       WeightLayoutName(q.b.layout)));
    }
    if (nvfp4_a_) {
      // (A resident A in the swap-AB layout reaches the kernel unpacked: the launch's.)
      if (!q.a.has_value() || q.a->format != QuantFormat::kNvfp4) {
        return absl::FailedPreconditionError(absl::StrCat(name_, " takes an NVFP4 A"));
      }
    } else if (q.a.has_value() || q.a_dense_type != DataType::kFloat16) {
      return absl::FailedPreconditionError(absl::StrCat(name_, " takes a dense FLOAT16 A"));
    }
    return NotHere(SwapAbRuns(kArenaAligned, q.m, kArenaAligned, q.n, q.k, path_));
  }

  size_t WorkspaceBytes(const QuantizedOperands& q) const override {
    return nvfp4_a_ ? Nvfp4HalfBytes(q.m, q.k) : 0;
  }

  absl::Status Launch(const QuantizedOperands& q, const QuantizedDeviceOperands& d, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream) const override {
    // The store keeps the scales right after the data (both regions' sizes are multiples
    // of 256 bytes for shapes with the layout), where the kernels read them.
    const int64_t data_bytes = format_ == QuantFormat::kInt8 ? q.n * q.k : q.n * q.k / 2;
    if (static_cast<const char*>(d.b_scales) != static_cast<const char*>(d.b) + data_bytes) {
      return absl::InternalError(
          absl::StrCat(name_, " needs the weight's scales right after its data"));
    }
    if (nvfp4_a_) {
      if (workspace_bytes < WorkspaceBytes(q)) {
        return absl::InternalError(absl::StrCat(name_, ": workspace too small"));
      }
      return LaunchSwapAbNvfp4xNvfp4(d.a, d.a_scales, q.a->tensor_scale, q.m, d.b, q.b.tensor_scale,
                                     q.n, q.k, d.c, workspace, stream);
    }
    SwapAbOptions options;
    options.path = path_;
    return format_ == QuantFormat::kInt8
               ? LaunchSwapAbInt8(d.a, q.m, d.b, q.n, q.k, d.c, stream, options)
               : LaunchSwapAbNvfp4(d.a, q.m, d.b, q.b.tensor_scale, q.n, q.k, d.c, stream, options);
  }

 private:
  const QuantFormat format_;
  const SwapAbPath path_;
  const bool nvfp4_a_;
  const std::string name_;
};

}  // namespace

std::string SkinnyKernelName(QuantFormat format, SkinnyPath path) {
  const char* way = path == SkinnyPath::kRing     ? "ring"
                    : path == SkinnyPath::kStream ? "stream"
                                                  : "regs";
  return absl::StrCat("skinny_", format == QuantFormat::kInt8 ? "int8" : "nvfp4", "_", way,
                      "_mma16816");
}

DeviceQuantizedWeight PlacedWeight(const QuantizedOperand& x, int64_t rows, int64_t k) {
  return DeviceQuantizedWeight{x.format, kArenaAligned, kArenaAligned, x.tensor_scale, rows, k};
}

DataType DenseA(const QuantizedOperands& q) {
  return q.a.has_value() ? DataType::kFloat32 : q.a_dense_type;
}

std::vector<std::unique_ptr<QuantizedGemmKernel>> MakeQuantizedKernels() {
  std::vector<std::unique_ptr<QuantizedGemmKernel>> kernels;
  for (QuantFormat format : {QuantFormat::kInt8, QuantFormat::kNvfp4}) {
    for (SkinnyPath path : {SkinnyPath::kRing, SkinnyPath::kRegisters, SkinnyPath::kStream}) {
      kernels.push_back(std::make_unique<SkinnyKernel>(format, path));
    }
  }
  // wgmma first: where both run, it is the one to prefer.
  for (SwapAbPath path : {SwapAbPath::kWgmma, SwapAbPath::kMmaSync}) {
    if (path == SwapAbPath::kWgmma && !SwapAbWgmmaBuilt()) continue;
    for (QuantFormat format : {QuantFormat::kInt8, QuantFormat::kNvfp4}) {
      kernels.push_back(std::make_unique<SwapAbKernel>(format, path));
    }
    if (path == SwapAbPath::kWgmma) {
      kernels.push_back(std::make_unique<SwapAbKernel>(QuantFormat::kNvfp4, path, true));
    }
  }
  for (SquareMmaPath mma : {SquareMmaPath::kWgmma, SquareMmaPath::kMmaSync}) {
    if (mma == SquareMmaPath::kWgmma && !SquareWgmmaBuilt()) continue;
    kernels.push_back(std::make_unique<SquareKernel>(QuantFormat::kInt8, false, mma));
    kernels.push_back(std::make_unique<SquareKernel>(QuantFormat::kNvfp4, false, mma));
    kernels.push_back(std::make_unique<SquareKernel>(QuantFormat::kNvfp4, true, mma));
  }
  return kernels;
}

}  // namespace gemmd::gpu
