#include "kernels/cuda/dense/tiled_gemm.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/alignment.h"
#include "kernels/cuda/common/cuda_status.h"

namespace gemmd::gpu::internal {
namespace {

// The tile kernels index rows and columns with int.
constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridZ = 65535;
constexpr int64_t kMaxGridY = 65535;
// Split-K aims for this many blocks (a few waves on 100+ multiprocessors) ...
constexpr int64_t kSplitKTargetBlocks = 512;
// ... but leaves each block at least this much K (below it the reduction costs more
// than the extra parallelism buys).
constexpr int64_t kSplitKMinK = 256;
constexpr int64_t kMaxSplits = 64;
constexpr size_t kWorkspaceAlign = 256;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }
size_t AlignBytes(size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

const void* ByteOffset(const void* base, int64_t elements, size_t elem_bytes) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(elem_bytes);
}

struct OperandPlan {
  bool pack = false;
  int64_t rows = 0;  // stored matrix of one item
  int64_t cols = 0;
  int64_t ld_src = 0;
  int64_t stride_src = 0;
  bool transpose = false;  // the packer writes it transposed (k_major variants)
  int64_t items = 0;  // items the packer writes (1 for a broadcast operand)
  int64_t ld = 0;     // what the tile kernel reads
  int64_t stride = 0;
  size_t ws_offset = 0;
  size_t ws_bytes = 0;
};

struct Plan {
  OperandPlan a;
  OperandPlan b;
  int64_t splits = 1;
  int64_t k_per_split = 0;
  int64_t chunk = 1;  // batch items per launch
  size_t partial_offset = 0;
  size_t partial_bytes = 0;
  size_t total_bytes = 0;
};

class TiledGemmKernel final : public GpuGemmKernel {
 public:
  explicit TiledGemmKernel(TileVariant v) : v_(std::move(v)) {}

  std::string_view name() const override { return v_.name; }
  Precision precision() const override { return v_.precision; }
  int min_compute_capability() const override { return v_.min_compute_capability; }
  bool RunsOn(int compute_capability) const override {
    return v_.sm90a_only ? compute_capability == 90
                         : compute_capability >= v_.min_compute_capability;
  }
  DataType operand_type() const override { return v_.operand_type; }
  bool splits_k() const override { return v_.split_k; }
  CostProfile cost_profile() const override { return v_.profile; }

  absl::Status Check(const GemmProblem& p) const override {
    if (p.batch < 0 || p.m < 0 || p.n < 0 || p.k < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative size: batch=", p.batch,
                                                     " m=", p.m, " n=", p.n, " k=", p.k));
    }
    if (p.batch_stride_a < -1 || p.batch_stride_b < -1 || p.batch_stride_c_in < -1 ||
        p.batch_stride_c < -1) {
      return absl::InvalidArgumentError("batch strides must be >= 0 (or -1 for dense)");
    }
    if (p.batch > 1 && p.batch_stride_c == 0) {
      return absl::InvalidArgumentError("batch_stride_c == 0 would make batch items race");
    }
    if (p.precision != v_.precision) {
      return absl::FailedPreconditionError(
          absl::StrCat(v_.name, " computes ", Sv(PrecisionName(v_.precision)), ", not ",
                       Sv(PrecisionName(p.precision))));
    }
    if (p.c_type != DataType::kFloat32) {
      return absl::FailedPreconditionError(absl::StrCat(
          v_.name, " writes FLOAT32 output only, not ", Sv(DataTypeName(p.c_type))));
    }
    if (p.a_type != p.b_type) {
      return absl::FailedPreconditionError(
          absl::StrCat(v_.name, " needs a_type == b_type, got ", Sv(DataTypeName(p.a_type)),
                       " and ", Sv(DataTypeName(p.b_type))));
    }
    if (!AcceptsInput(p.a_type)) {
      return absl::FailedPreconditionError(absl::StrCat(
          v_.name, " (", Sv(DataTypeName(v_.operand_type)), " operands) does not take ",
          Sv(DataTypeName(p.a_type)), " inputs"));
    }
    if (p.m > kMaxDim || p.n > kMaxDim || p.k > kMaxDim) {
      return absl::FailedPreconditionError(
          absl::StrCat(v_.name, " handles M, N, K < 2^31, got m=", p.m, " n=", p.n,
                       " k=", p.k));
    }
    const int64_t tiles_m = CeilDiv(p.m, v_.tile_m);
    const int64_t tiles_n = CeilDiv(p.n, v_.tile_n);
    if (tiles_m * tiles_n > kMaxDim) {
      return absl::FailedPreconditionError(
          absl::StrCat(v_.name, ": too many tiles (", tiles_m * tiles_n, ")"));
    }
    return absl::OkStatus();
  }

  LaunchGeometry Geometry(const GemmProblem& p) const override {
    LaunchGeometry g;
    if (!Check(p).ok()) return g;
    const Plan plan = MakePlan(p, GemmOperands{});
    g.tile_m = v_.tile_m;
    g.tile_n = v_.tile_n;
    g.tile_k = v_.tile_k;
    g.splits = plan.splits;
    g.k_per_split = std::min(plan.k_per_split, p.k);
    g.blocks = CeilDiv(p.m, v_.tile_m) * CeilDiv(p.n, v_.tile_n) * p.batch * plan.splits;
    g.pack_bytes = static_cast<int64_t>((plan.a.pack ? plan.a.ws_bytes : 0) +
                                        (plan.b.pack ? plan.b.ws_bytes : 0));
    return g;
  }

  size_t WorkspaceBytes(const GemmProblem& p) const override {
    return MakePlan(p, GemmOperands{}).total_bytes;
  }
  size_t WorkspaceBytes(const GemmProblem& p, const GemmOperands& ops) const override {
    return MakePlan(p, ops).total_bytes;
  }

  absl::Status Launch(const GemmProblem& p, const GemmOperands& ops, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream) const override {
    GEMMD_GPU_RETURN_IF_ERROR(Check(p));
    if (p.batch == 0 || p.m == 0 || p.n == 0) return absl::OkStatus();
    if (ops.c_out == nullptr) return absl::InvalidArgumentError("c_out is null");
    if (p.k > 0 && (ops.a == nullptr || ops.b == nullptr)) {
      return absl::InvalidArgumentError("a or b is null");
    }
    const bool read_c = p.beta != 0.0f;
    if (read_c && ops.c_in == nullptr) {
      return absl::InvalidArgumentError("beta != 0 but c_in is null");
    }
    const Plan plan = MakePlan(p, ops);
    if (plan.total_bytes > 0 && (workspace == nullptr || workspace_bytes < plan.total_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(v_.name, " needs a workspace of ", plan.total_bytes, " bytes, got ",
                       workspace == nullptr ? 0 : workspace_bytes));
    }
    char* ws = static_cast<char*>(workspace);
    const size_t in_bytes = DataTypeSize(p.a_type);
    const size_t op_bytes = DataTypeSize(v_.operand_type);

    const void* a = ops.a;
    const void* b = ops.b;
    if (p.k > 0) {
      if (plan.a.pack) {
        void* dst = ws + plan.a.ws_offset;
        GEMMD_GPU_RETURN_IF_ERROR(Pack(p.a_type, a, plan.a, dst, stream));
        a = dst;
      }
      if (plan.b.pack) {
        void* dst = ws + plan.b.ws_offset;
        GEMMD_GPU_RETURN_IF_ERROR(Pack(p.b_type, b, plan.b, dst, stream));
        b = dst;
      }
    }
    const size_t a_elem = plan.a.pack ? op_bytes : in_bytes;
    const size_t b_elem = plan.b.pack ? op_bytes : in_bytes;
    float* partial = plan.splits > 1 ? reinterpret_cast<float*>(ws + plan.partial_offset)
                                     : nullptr;

    for (int64_t b0 = 0; b0 < p.batch; b0 += plan.chunk) {
      const int64_t items = std::min(plan.chunk, p.batch - b0);
      TileArgs t;
      t.m = static_cast<int>(p.m);
      t.n = static_cast<int>(p.n);
      t.k = static_cast<int>(p.k);
      t.lda = plan.a.ld;
      t.ldb = plan.b.ld;
      t.stride_a = plan.a.stride;
      t.stride_b = plan.b.stride;
      t.a = p.k > 0 ? ByteOffset(a, b0 * plan.a.stride, a_elem) : nullptr;
      t.b = p.k > 0 ? ByteOffset(b, b0 * plan.b.stride, b_elem) : nullptr;
      t.batch = static_cast<int>(items);
      t.splits = static_cast<int>(plan.splits);
      t.k_per_split = static_cast<int>(plan.k_per_split);
      // A transposed copy is stored the other way round.
      t.trans_a = p.transpose_a != plan.a.transpose;
      t.trans_b = p.transpose_b != plan.b.transpose;
      const float* c_in =
          read_c ? static_cast<const float*>(ops.c_in) + b0 * p.StrideCIn() : nullptr;
      float* c_out = static_cast<float*>(ops.c_out) + b0 * p.StrideC();
      if (plan.splits > 1) {
        t.c = partial;
        t.ldc = p.n;
        t.stride_c = plan.splits * p.m * p.n;
        t.split_stride_c = p.m * p.n;
        t.alpha = 1.0f;
        t.beta = 0.0f;
        t.c_vec = p.n % 4 == 0;
      } else {
        t.c = c_out;
        t.c_in = c_in;
        t.ldc = p.n;
        t.stride_c = p.StrideC();
        t.stride_c_in = p.StrideCIn();
        t.alpha = p.alpha;
        t.beta = p.beta;
        t.c_vec = p.n % 4 == 0 && Aligned16(c_out) && p.StrideC() % 4 == 0 &&
                  (!read_c || (Aligned16(c_in) && p.StrideCIn() % 4 == 0));
      }
      GEMMD_GPU_RETURN_IF_ERROR(v_.launch(t, stream));
      if (plan.splits > 1) {
        GEMMD_GPU_RETURN_IF_ERROR(LaunchSplitKReduce(
            partial, static_cast<int>(plan.splits), p.m, p.n, items, p.alpha, p.beta,
            c_in, p.StrideCIn(), c_out, p.StrideC(), stream));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Pack(DataType in_type, const void* src, const OperandPlan& o, void* dst,
                    cudaStream_t stream) const {
    if (o.transpose) {
      return LaunchPackTransposed(in_type, src, o.rows, o.cols, o.ld_src, o.stride_src,
                                  o.items, v_.operand_type, dst, o.ld, o.cols * o.ld, stream);
    }
    return LaunchPack(in_type, src, o.rows, o.cols, o.ld_src, o.stride_src, o.items,
                      v_.operand_type, dst, o.ld, o.rows * o.ld, stream);
  }

  bool AcceptsInput(DataType t) const {
    switch (v_.operand_type) {
      case DataType::kFloat32:  // FP16/BF16 widen exactly
        return t == DataType::kFloat32 || t == DataType::kFloat16 ||
               t == DataType::kBFloat16;
      case DataType::kFloat16:  // FP32 rounds to FP16 (TensorOperandType)
        return t == DataType::kFloat32 || t == DataType::kFloat16;
      case DataType::kBFloat16:
        return t == DataType::kBFloat16;
      default:
        return false;
    }
  }

  // `transpose`: the tile needs the stored [rows, cols] as [cols, rows].
  OperandPlan PlanOperand(DataType in_type, const void* ptr, int64_t rows, int64_t cols,
                          int64_t stride, int64_t batch, bool transpose = false) const {
    OperandPlan o;
    o.rows = rows;
    o.cols = cols;
    o.ld_src = cols;
    o.stride_src = stride;
    o.transpose = transpose;
    const int64_t vec = 16 / static_cast<int64_t>(DataTypeSize(v_.operand_type));
    // The tile kernels read 16-byte chunks straight from global memory; anything that
    // breaks that (another element type, a misaligned row or item, a layout the tile
    // does not read) goes through the packer first.
    o.pack = transpose || in_type != v_.operand_type || !Aligned16(ptr) ||
             o.ld_src % vec != 0 || (batch > 1 && stride % vec != 0);
    if (!o.pack) {
      o.ld = o.ld_src;
      o.stride = stride;
      return o;
    }
    const int64_t out_rows = transpose ? cols : rows;
    const int64_t out_cols = transpose ? rows : cols;
    o.ld = RoundUp(out_cols, vec);
    o.items = (stride == 0 || batch <= 1) ? 1 : batch;
    o.stride = o.items == 1 ? 0 : out_rows * o.ld;
    o.ws_bytes =
        static_cast<size_t>(o.items * out_rows * o.ld) * DataTypeSize(v_.operand_type);
    return o;
  }

  Plan MakePlan(const GemmProblem& p, const GemmOperands& ops) const {
    Plan plan;
    if (!Check(p).ok() || p.batch == 0 || p.m == 0 || p.n == 0) return plan;
    if (p.k > 0) {
      plan.a = PlanOperand(p.a_type, ops.a, p.transpose_a ? p.k : p.m,
                           p.transpose_a ? p.m : p.k, p.StrideA(), p.batch,
                           v_.k_major && p.transpose_a);
      plan.b = PlanOperand(p.b_type, ops.b, p.transpose_b ? p.n : p.k,
                           p.transpose_b ? p.k : p.n, p.StrideB(), p.batch,
                           v_.k_major && !v_.b_either_major && !p.transpose_b);
    }
    plan.k_per_split = RoundUp(std::max<int64_t>(p.k, 1), v_.tile_k);
    if (v_.split_k && p.k > 0) {
      // A planned row block splits K as its whole product does (GemmProblem::plan_m).
      const int64_t tiles =
          CeilDiv(p.PlanM(), v_.tile_m) * CeilDiv(p.n, v_.tile_n) * std::min(p.batch, kMaxGridZ);
      const int64_t target =
          v_.split_k_target_blocks > 0 ? v_.split_k_target_blocks : kSplitKTargetBlocks;
      if (tiles < target) {
        int64_t splits = std::min({CeilDiv(target, tiles), p.k / kSplitKMinK,
                                   kMaxSplits, kMaxGridY});
        if (splits > 1) {
          plan.k_per_split = RoundUp(CeilDiv(p.k, splits), v_.tile_k);
          plan.splits = CeilDiv(p.k, plan.k_per_split);
        }
      }
    }
    plan.chunk = std::min(p.batch, kMaxGridZ);
    size_t offset = 0;
    if (plan.a.pack) {
      plan.a.ws_offset = offset;
      offset += AlignBytes(plan.a.ws_bytes);
    }
    if (plan.b.pack) {
      plan.b.ws_offset = offset;
      offset += AlignBytes(plan.b.ws_bytes);
    }
    if (plan.splits > 1) {
      plan.partial_offset = offset;
      plan.partial_bytes =
          static_cast<size_t>(plan.chunk * plan.splits * p.m * p.n) * sizeof(float);
      offset += AlignBytes(plan.partial_bytes);
    }
    plan.total_bytes = offset;
    return plan;
  }

  TileVariant v_;
};

}  // namespace

std::unique_ptr<GpuGemmKernel> MakeTiledGemmKernel(TileVariant variant) {
  return std::make_unique<TiledGemmKernel>(std::move(variant));
}

}  // namespace gemmd::gpu::internal
