// The CUDA device's arena planning, on the CPU: where each operand goes, what is copied
// in and out, and what is read in place, for dense, stacked and quantized launches.
#include "server/devices/cuda/arena_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/quant_formats.h"

namespace gemmd {
namespace {

GemmProblem Problem(int64_t m, int64_t n, int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

// Host buffers for one item of m x n x k FP32.
struct HostItem {
  HostItem(int64_t m, int64_t n, int64_t k)
      : a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n)) {}
  std::vector<float> a, b, c_in, c;
  GemmOperands operands() { return {a.data(), b.data(), c_in.empty() ? nullptr : c_in.data(), c.data()}; }
};

TEST(ArenaPlanTest, DenseItemsSitBackToBackInAlignedRegions) {
  HostItem one(3, 5, 7), two(3, 5, 7);
  DeviceLaunch launch;
  launch.problem = Problem(3, 5, 7);
  launch.problem.batch = 2;
  launch.items.push_back({Problem(3, 5, 7), one.operands()});
  launch.items.push_back({Problem(3, 5, 7), two.operands()});
  absl::StatusOr<DenseArena> arena = PlanDenseArena(launch);
  ASSERT_TRUE(arena.ok()) << arena.status();
  const int64_t a_item = 3 * 7 * 4, b_item = 7 * 5 * 4, c_item = 3 * 5 * 4;
  EXPECT_EQ(arena->a_at, 0);
  EXPECT_EQ(arena->b_at, AlignUp(2 * a_item));
  EXPECT_EQ(arena->c_in_at, AlignUp(arena->b_at + 2 * b_item));
  EXPECT_EQ(arena->c_at, arena->c_in_at);  // beta = 0: no C_in region
  EXPECT_EQ(arena->c32_at, arena->c_at);
  EXPECT_EQ(arena->copies.workspace_at, AlignUp(arena->c_at + 2 * c_item + 16));
  EXPECT_FALSE(arena->reads_c_in);
  EXPECT_FALSE(arena->converts);
  ASSERT_EQ(arena->copies.in.size(), 4u);  // A, A, B, B in arena order
  EXPECT_EQ(arena->copies.in[0].from, one.a.data());
  EXPECT_EQ(arena->copies.in[1].from, two.a.data());
  EXPECT_EQ(arena->copies.in[1].at, a_item);
  EXPECT_EQ(arena->copies.in[2].from, one.b.data());
  EXPECT_EQ(arena->copies.in[2].at, arena->b_at);
  EXPECT_EQ(arena->copies.in[3].at, arena->b_at + b_item);
  for (const ArenaCopyIn& in : arena->copies.in) EXPECT_FALSE(in.from_device);
  ASSERT_EQ(arena->copies.out.size(), 2u);
  EXPECT_EQ(arena->copies.out[0].to, one.c.data());
  EXPECT_EQ(arena->copies.out[1].at, arena->c_at + c_item);
  EXPECT_EQ(arena->copies.out[1].bytes, c_item);
  for (int64_t at : {arena->b_at, arena->c_in_at, arena->c_at, arena->copies.workspace_at}) {
    EXPECT_EQ(at % kRegionAlignment, 0);
  }
}

TEST(ArenaPlanTest, AHalfPrecisionResultGetsFp32RegionsAndCInIsRead) {
  HostItem item(4, 4, 4);
  std::vector<uint16_t> c_in(16), c(16);
  GemmProblem p = Problem(4, 4, 4);
  p.beta = 1.0f;
  p.c_type = DataType::kFloat16;
  DeviceLaunch launch;
  launch.problem = p;
  launch.items.push_back({p, {item.a.data(), item.b.data(), c_in.data(), c.data()}});
  absl::StatusOr<DenseArena> arena = PlanDenseArena(launch);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_TRUE(arena->reads_c_in);
  EXPECT_TRUE(arena->converts);
  EXPECT_EQ(arena->c_in_elements, 16);
  EXPECT_EQ(arena->c_elements, 16);
  EXPECT_EQ(arena->c_at, AlignUp(arena->c_in_at + 16 * 2));
  EXPECT_EQ(arena->c_in32_at, AlignUp(arena->c_at + 16 * 2 + 16));
  EXPECT_EQ(arena->c32_at, AlignUp(arena->c_in32_at + 16 * 4 + 16));
  EXPECT_EQ(arena->copies.workspace_at, AlignUp(arena->c32_at + 16 * 4));
  ASSERT_EQ(arena->copies.in.size(), 3u);
  EXPECT_EQ(arena->copies.in[2].from, c_in.data());
  EXPECT_EQ(arena->copies.in[2].bytes, 32);
  ASSERT_EQ(arena->copies.out.size(), 1u);
  EXPECT_EQ(arena->copies.out[0].bytes, 32);  // C leaves in its own type
}

TEST(ArenaPlanTest, AStackReadsItsResidentBInPlaceAndItsPiecesInOrder) {
  const float resident_b[6] = {};  // stands for device memory
  DeviceOperands resident;
  resident.b = resident_b;
  std::vector<float> a1(2 * 3), a2(1 * 3), c1(2 * 2), c2(1 * 2);
  // The second item's A arrived in two pieces.
  HostPieces pieces;
  pieces.a = {absl::string_view(reinterpret_cast<const char*>(a2.data()), 8),
              absl::string_view(reinterpret_cast<const char*>(a2.data()) + 8, 4)};
  DeviceLaunch launch;
  launch.stacked = true;
  launch.problem = Problem(3, 2, 3);
  launch.items.push_back({Problem(2, 2, 3), {a1.data(), nullptr, nullptr, c1.data()}, nullptr,
                          nullptr, nullptr, &resident});
  launch.items.push_back({Problem(1, 2, 3), {nullptr, nullptr, nullptr, c2.data()}, &pieces,
                          nullptr, nullptr, &resident});
  absl::StatusOr<DenseArena> arena = PlanDenseArena(launch);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ(arena->resident_b, resident_b);
  EXPECT_EQ(arena->c_in_at, arena->b_at);  // no B region
  ASSERT_EQ(arena->copies.in.size(), 3u);
  EXPECT_EQ(arena->copies.in[0].bytes, 24);
  EXPECT_EQ(arena->copies.in[1].at, 24);
  EXPECT_EQ(arena->copies.in[1].bytes, 8);
  EXPECT_EQ(arena->copies.in[2].at, 32);
  EXPECT_EQ(arena->copies.in[2].bytes, 4);
  ASSERT_EQ(arena->copies.out.size(), 2u);
  EXPECT_EQ(arena->copies.out[1].at, arena->c_at + 16);  // after the first caller's rows
}

TEST(ArenaPlanTest, AResidentCIsWrittenOnTheDeviceAndAMissingBufferIsRefused) {
  HostItem item(2, 2, 2);
  float kept[4];
  DeviceOperands resident;
  resident.c_out = kept;
  DeviceLaunch launch;
  launch.problem = Problem(2, 2, 2);
  launch.items.push_back({Problem(2, 2, 2), {item.a.data(), item.b.data(), nullptr, nullptr},
                          nullptr, nullptr, nullptr, &resident});
  absl::StatusOr<DenseArena> arena = PlanDenseArena(launch);
  ASSERT_TRUE(arena.ok()) << arena.status();
  ASSERT_EQ(arena->copies.out.size(), 1u);
  EXPECT_TRUE(arena->copies.out[0].to_device);
  EXPECT_EQ(arena->copies.out[0].to, kept);

  launch.items[0].resident = nullptr;  // now C goes nowhere
  EXPECT_EQ(PlanDenseArena(launch).status(),
            absl::InvalidArgumentError("item 0 of the launch is missing a host operand buffer"));
  EXPECT_EQ(PlanDenseArena(DeviceLaunch()).status(), absl::InvalidArgumentError("empty launch"));
}

QuantizedOperands Nvfp4(int64_t m, int64_t n, int64_t k, absl::string_view codes,
                        absl::string_view scales, absl::string_view a_dense) {
  QuantizedOperands q;
  q.m = m;
  q.n = n;
  q.k = k;
  q.b.format = QuantFormat::kNvfp4;
  q.b.data = codes;
  q.b.scales = scales;
  q.a_dense = a_dense;
  q.a_dense_type = DataType::kFloat32;
  return q;
}

TEST(ArenaPlanTest, AQuantizedStackStagesEveryCallersRowsAndReadsAResidentWeight) {
  const std::string codes(64, 'c'), scales(8, 's'), a1(2 * 16 * 4, 'a'), a2(1 * 16 * 4, 'a');
  QuantizedOperands q1 = Nvfp4(2, 8, 16, codes, scales, a1);
  QuantizedOperands q2 = Nvfp4(1, 8, 16, codes, scales, a2);
  QuantizedOperands stack = Nvfp4(3, 8, 16, codes, scales, absl::string_view());
  float c1[16], c2[8];
  DeviceOperands resident;
  resident.b = codes.data();
  resident.b_scales = scales.data();
  DeviceLaunch launch;
  launch.stacked = true;
  launch.stacked_quantized = &stack;
  launch.items.push_back({Problem(2, 8, 16), {nullptr, nullptr, nullptr, c1}, nullptr, &q1,
                          nullptr, &resident});
  launch.items.push_back({Problem(1, 8, 16), {nullptr, nullptr, nullptr, c2}, nullptr, &q2,
                          nullptr, &resident});
  absl::StatusOr<QuantizedArena> arena = PlanQuantizedArena(launch, "k", /*reads_packed_a=*/false);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ(arena->operands, &stack);
  EXPECT_EQ(arena->resident_b, codes.data());
  EXPECT_EQ(arena->resident_b_scales, scales.data());
  EXPECT_EQ(arena->resident_a, nullptr);
  EXPECT_EQ(arena->resident_c, nullptr);
  ASSERT_EQ(arena->copies.in.size(), 2u);  // the two callers' rows; no weight copies
  EXPECT_EQ(arena->copies.in[0].from, a1.data());
  EXPECT_EQ(arena->copies.in[1].at, static_cast<int64_t>(a1.size()));
  EXPECT_EQ(arena->c_at, AlignUp(a1.size() + a2.size()));
  ASSERT_EQ(arena->copies.out.size(), 2u);
  EXPECT_EQ(arena->copies.out[0].bytes, 2 * 8 * 4);
  EXPECT_EQ(arena->copies.out[1].at, arena->c_at + 2 * 8 * 4);
  EXPECT_EQ(arena->copies.workspace_at, AlignUp(arena->c_at + 3 * 8 * 4));

  EXPECT_EQ(PlanQuantizedArena(launch, "k", /*reads_packed_a=*/true).status(),
            absl::InvalidArgumentError("kernel k reads a quantized A"));
  launch.stacked_quantized = nullptr;
  EXPECT_EQ(PlanQuantizedArena(launch, "k", false).status(),
            absl::InvalidArgumentError("kernel k runs one QuantizedMatmul at a time, or a stack "
                                       "of them against one weight"));
}

TEST(ArenaPlanTest, AQuantizedCallStagesPackedAAndItsWeight) {
  const std::string codes(64, 'c'), scales(8, 's'), a_codes(16, 'x'), a_scales(2, 'y');
  QuantizedOperands q = Nvfp4(2, 8, 16, codes, scales, absl::string_view());
  QuantizedOperand a;
  a.format = QuantFormat::kNvfp4;
  a.data = a_codes;
  a.scales = a_scales;
  q.a = a;
  float c[16];
  DeviceLaunch launch;
  launch.items.push_back({Problem(2, 8, 16), {nullptr, nullptr, nullptr, c}, nullptr, &q});
  absl::StatusOr<QuantizedArena> arena = PlanQuantizedArena(launch, "k", /*reads_packed_a=*/true);
  ASSERT_TRUE(arena.ok()) << arena.status();
  ASSERT_EQ(arena->copies.in.size(), 4u);  // A codes, A scales, B codes, B scales
  EXPECT_EQ(arena->copies.in[1].at, arena->a_scales_at);
  EXPECT_EQ(arena->a_scales_at, AlignUp(16));
  EXPECT_EQ(arena->b_at, AlignUp(arena->a_scales_at + 2));
  EXPECT_EQ(arena->copies.in[3].from, scales.data());
  EXPECT_EQ(arena->c_at, AlignUp(arena->b_scales_at + 8));
  ASSERT_EQ(arena->copies.out.size(), 1u);
  EXPECT_EQ(arena->copies.out[0].to, c);
}

}  // namespace
}  // namespace gemmd
