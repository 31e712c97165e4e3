#include "kernels/cuda/common/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace gemmd::gpu::internal {
namespace {

using EncodeTiledFn = PFN_cuTensorMapEncodeTiled_v12000;

EncodeTiledFn EncodeTiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult query;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &query) != cudaSuccess ||
        query != cudaDriverEntryPointSuccess) {
      return static_cast<EncodeTiledFn>(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

}  // namespace

absl::Status MakeTensorMap3d(CUtensorMap* map, CUtensorMapDataType type, int element_bytes,
                             const void* base, int64_t inner, int64_t outer, int64_t ld,
                             int64_t stride, int items, int box_inner, int box_outer, int box_items,
                             bool swizzle) {
  const EncodeTiledFn encode = EncodeTiled();
  if (encode == nullptr) {
    return absl::InternalError("the CUDA driver has no cuTensorMapEncodeTiled");
  }
  const bool batched = stride != 0 && items > 1;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer),
                              static_cast<cuuint64_t>(batched ? items : 1)};
  const cuuint64_t strides[2] = {
      static_cast<cuuint64_t>(ld * element_bytes),
      static_cast<cuuint64_t>((batched ? stride : outer * ld) * element_bytes)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_inner), static_cast<cuuint32_t>(box_outer),
                             static_cast<cuuint32_t>(box_items)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, type, 3, const_cast<void*>(base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat("cuTensorMapEncodeTiled failed (CUresult ", r,
                                            ") for inner=", inner, " outer=", outer, " ld=", ld,
                                            " stride=", stride, " items=", items));
  }
  return absl::OkStatus();
}

}  // namespace gemmd::gpu::internal
