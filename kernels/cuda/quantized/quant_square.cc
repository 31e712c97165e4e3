// Host side of the square quantized kernels: which operands they take (quant_square.h).
#include "kernels/cuda/quantized/quant_square.h"

#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gemmd::gpu {
namespace {

constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;  // the kernels index tiles with int

bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// One quantized operand [rows, k]; `what` names it in messages.
absl::Status CheckOperand(const DeviceQuantizedWeight& x, const char* what) {
  if (x.n < 0 || x.k < 0 || x.n > kMaxDim || x.k > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": sizes [", x.n, ", ", x.k, "] outside [0, 2^31-1]"));
  }
  if (x.data == nullptr || x.scales == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null data or scales"));
  }
  if (x.format == QuantFormat::kInt8) {
    if (x.k % 16 != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": INT8 K = ", x.k, " is not a multiple of 16 (16-byte row alignment)"));
    }
    if (!Aligned(x.data, 16) || !Aligned(x.scales, 4)) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": INT8 data must be 16-byte and scales 4-byte aligned"));
    }
    return absl::OkStatus();
  }
  if (x.k % kNvfp4BlockSize != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": NVFP4 K = ", x.k, " is not a multiple of 16"));
  }
  if (x.k % 32 != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": NVFP4 K = ", x.k,
        " is not a multiple of 32 (the kernel copies 16-byte rows of packed codes)"));
  }
  if (!Aligned(x.data, 16) || !Aligned(x.scales, 4)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": NVFP4 codes must be 16-byte and scales 4-byte aligned"));
  }
  if (!std::isfinite(x.tensor_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tensor scale is not finite"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SupportsSquareQuantizedGemm(const DeviceQuantizedWeight& a,
                                         const DeviceQuantizedWeight& b) {
  if (absl::Status s = CheckOperand(a, "A"); !s.ok()) return s;
  if (absl::Status s = CheckOperand(b, "B"); !s.ok()) return s;
  if (a.k != b.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("K of A (", a.k, ") and of B (", b.k, ") differ"));
  }
  if (a.format != b.format) {
    return absl::FailedPreconditionError(
        absl::StrCat("mixed formats (A ", QuantFormatName(a.format), ", B ",
                     QuantFormatName(b.format), ") are not supported"));
  }
  return absl::OkStatus();
}

absl::Status SupportsSquareFp16Nvfp4Gemm(const void* a, int64_t m, int64_t k,
                                         const DeviceQuantizedWeight& b) {
  if (b.format != QuantFormat::kNvfp4) {
    return absl::FailedPreconditionError("FP16 A is only supported against NVFP4 B");
  }
  if (absl::Status s = CheckOperand(b, "B"); !s.ok()) return s;
  if (m < 0 || m > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat("A: M = ", m, " outside [0, 2^31-1]"));
  }
  if (k != b.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("K of A (", k, ") and of B (", b.k, ") differ"));
  }
  if (a == nullptr) return absl::InvalidArgumentError("A: null pointer");
  if (!Aligned(a, 16)) {
    return absl::FailedPreconditionError("A: FP16 data must be 16-byte aligned");
  }
  return absl::OkStatus();
}

bool SquareWgmmaBuilt() {
#if defined(GEMMD_HAVE_SM90A)
  return true;
#else
  return false;
#endif
}

// sm_90a code runs on 9.0 alone.
bool SquareWgmmaRuns(int compute_capability) {
  return SquareWgmmaBuilt() && compute_capability == 90;
}

bool SquareWgmmaAvailable() {
  int device = 0, major = 0, minor = 0;
  return SquareWgmmaBuilt() && cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
             cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) ==
             cudaSuccess &&
         SquareWgmmaRuns(major * 10 + minor);
}

namespace {

// kAuto resolved on the current device; FAILED_PRECONDITION for kWgmma where it cannot run.
absl::StatusOr<bool> UseWgmma(SquareMmaPath path) {
  const bool available = SquareWgmmaAvailable();
  if (path == SquareMmaPath::kWgmma && !available) {
    return absl::FailedPreconditionError(
        "the wgmma kernels need a build with sm_90a and a compute capability 9.0 device");
  }
  return path != SquareMmaPath::kMmaSync && available;
}

}  // namespace

const char* SquareKernelName(QuantFormat format, bool fp16_a, SquareMmaPath path) {
  const bool wgmma = path == SquareMmaPath::kWgmma ||
                     (path == SquareMmaPath::kAuto && SquareWgmmaAvailable());
  if (format == QuantFormat::kInt8) {
    return wgmma ? "qgemm_int8_wgmma_128x256x128_s4" : "qgemm_int8_mma_128x128x64_s4";
  }
  if (fp16_a) {
    return wgmma ? "qgemm_f16xnvfp4_wgmma_128x256x64_s5" : "qgemm_f16xnvfp4_mma_128x128x64_s3";
  }
  return wgmma ? "qgemm_nvfp4_wgmma_128x256x64_s5" : "qgemm_nvfp4_mma_128x128x64_s4";
}

absl::Status LaunchSquareQuantizedGemm(const DeviceQuantizedWeight& a,
                                       const DeviceQuantizedWeight& b, float* c,
                                       cudaStream_t stream, SquareMmaPath path) {
  if (absl::Status s = SupportsSquareQuantizedGemm(a, b); !s.ok()) return s;
  if (c == nullptr) return absl::InvalidArgumentError("C: null pointer");
  const absl::StatusOr<bool> wgmma = UseWgmma(path);
  if (!wgmma.ok()) return wgmma.status();
  if (a.n == 0 || b.n == 0) return absl::OkStatus();
#if defined(GEMMD_HAVE_SM90A)
  if (*wgmma) {
    return a.format == QuantFormat::kInt8
               ? internal::LaunchInt8SquareWgmma(a, b, c, stream)
               : internal::LaunchNvfp4SquareWgmma(a, nullptr, a.n, b, c, stream);
  }
#endif
  return a.format == QuantFormat::kInt8
             ? internal::LaunchInt8SquareMma(a, b, c, stream)
             : internal::LaunchNvfp4SquareMma(a, nullptr, a.n, b, c, stream);
}

absl::Status LaunchSquareFp16Nvfp4Gemm(const void* a, int64_t m, int64_t k,
                                       const DeviceQuantizedWeight& b, float* c,
                                       cudaStream_t stream, SquareMmaPath path) {
  if (absl::Status s = SupportsSquareFp16Nvfp4Gemm(a, m, k, b); !s.ok()) return s;
  if (c == nullptr) return absl::InvalidArgumentError("C: null pointer");
  const absl::StatusOr<bool> wgmma = UseWgmma(path);
  if (!wgmma.ok()) return wgmma.status();
  if (m == 0 || b.n == 0) return absl::OkStatus();
#if defined(GEMMD_HAVE_SM90A)
  if (*wgmma) return internal::LaunchNvfp4SquareWgmma(DeviceQuantizedWeight{}, a, m, b, c, stream);
#endif
  return internal::LaunchNvfp4SquareMma(DeviceQuantizedWeight{}, a, m, b, c, stream);
}

}  // namespace gemmd::gpu
