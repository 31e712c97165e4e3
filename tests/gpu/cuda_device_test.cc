// CudaDevice (the server's CUDA backend) on a real GPU, with its staging ring and memory
// pool: batches of jobs go through pinned staging, one launch and copy-out, and every job's C is
// checked against the FP64 reference of its own operands (so results reaching the wrong job show
// up). Outputs are poisoned with NaN before each run; operands are seeded random (the seed is
// printed on failure; GEMM_TEST_SEED overrides it). Without a GPU every device test is skipped
// (visibly); the --devices syntax tests and the no-GPU answer still run.
//
// Tolerances (relative Frobenius error vs the FP64 reference on the stored operands):
//   FP32          <= 1e-5 (plain FP32 FMA, K up to 1024)
//   FP16_TENSOR   <= 5e-3 (FP16 / BF16 inputs; the kernels measure ~1e-3 and better, the
//                  slack keeps this a test of the device plumbing, not of rounding)
#include "server/devices/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/common/cuda_raii.h"
#include "kernels/gemm_problem.h"
#include "kernels/reference_gemm.h"
#include "server/devices/cuda/cuda_catalogue.h"
#include "server/devices/cuda/cuda_device_pool.h"
#include "server/devices/cuda/device_memory_pool.h"
#include "server/devices/cuda/pinned_host_allocator.h"
#include "server/devices/cuda/pinned_staging.h"
#include "server/devices/device.h"
#include "server/devices/host_copier.h"
#include "server/scheduling/batch.h"
#include "server/scheduling/job.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::NanBytes;
using ::gemmd::testing::RandomBytes;
using ::gemmd::testing::TestSeed;

constexpr double kFp32Tolerance = 1e-5;
constexpr double kTensorTolerance = 5e-3;

// One caller's request: host operands, its C buffer and the expected C (computed before
// the run, so an in-place job's C_in is still intact).
struct TestJob {
  GemmProblem problem;
  std::string a, b, c_in, c_out;
  bool in_place = false;         // c_in is c_out
  std::vector<double> expected;  // dense [batch, m, n]; empty when not precomputed
};

GemmProblem Problem(int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
  GemmProblem p;
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

std::unique_ptr<TestJob> MakeTestJob(const GemmProblem& p, std::mt19937_64& rng,
                                     bool in_place = false, bool reference = true) {
  auto t = std::make_unique<TestJob>();
  t->problem = p;
  t->in_place = in_place;
  t->a = RandomBytes(p.a_type, p.ElementsA(), rng);
  t->b = RandomBytes(p.b_type, p.ElementsB(), rng);
  if (p.beta != 0.0) t->c_in = RandomBytes(p.c_type, p.ElementsCIn(), rng);
  t->c_out = in_place ? t->c_in : NanBytes(p.c_type, p.ElementsC());
  if (reference) {
    const GemmOperands host{t->a.data(), t->b.data(), p.beta != 0.0f ? t->c_in.data() : nullptr,
                            nullptr};
    t->expected = ReferenceGemm(p, host);
  }
  return t;
}

std::unique_ptr<Job> ToJob(TestJob& t, const Kernel* kernel) {
  auto job = std::make_unique<Job>();
  job->problem = t.problem;
  job->operands.a = t.a.data();
  job->operands.b = t.b.data();
  if (t.problem.beta != 0.0f) job->operands.c_in = t.in_place ? t.c_out.data() : t.c_in.data();
  job->operands.c_out = t.c_out.data();
  job->kernel = kernel;
  return job;
}

// The launch the batcher would hand the device for `jobs` (one key) and `kernel`.
DeviceLaunch ToLaunch(const std::vector<std::unique_ptr<TestJob>>& jobs, const Kernel* kernel) {
  Batch batch;
  for (const auto& t : jobs) batch.jobs.push_back(ToJob(*t, kernel));
  batch.problem = PackedProblem(batch.jobs);
  batch.kernel = kernel;
  return LaunchOf(batch);  // copies what the device needs
}

// The packed problem of `jobs`.
GemmProblem PackedOf(const std::vector<std::unique_ptr<TestJob>>& jobs) {
  return ToLaunch(jobs, nullptr).problem;
}

// Runs `jobs` as one launch on `lane` of `device`, with the catalogue's kernel.
absl::Status RunOn(CudaDevice& device, const std::vector<std::unique_ptr<TestJob>>& jobs,
                   int lane) {
  absl::StatusOr<const Kernel*> kernel = CudaCatalogue(device.caps()).Select(PackedOf(jobs), "");
  if (!kernel.ok()) return kernel.status();
  LaunchTimes times;
  return device.Run(ToLaunch(jobs, *kernel), lane, &times);
}

double ErrorOf(const TestJob& t) {
  const GemmProblem& p = t.problem;
  return RelativeError(t.expected.data(), t.c_out.data(), p.c_type, p.batch * p.m * p.n);
}

void ExpectAllCorrect(const std::vector<std::unique_ptr<TestJob>>& jobs, double tolerance) {
  for (size_t j = 0; j < jobs.size(); ++j) {
    const double error = ErrorOf(*jobs[j]);
    EXPECT_LE(error, tolerance) << "job " << j << " of " << jobs.size();
  }
}

std::vector<std::unique_ptr<TestJob>> MakeJobs(const GemmProblem& p, int count,
                                               std::mt19937_64& rng) {
  std::vector<std::unique_ptr<TestJob>> jobs;
  for (int i = 0; i < count; ++i) jobs.push_back(MakeTestJob(p, rng));
  return jobs;
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(0, {});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    catalogue_ = std::make_unique<CudaCatalogue>(device_->caps());
  }

  // The catalogue's kernel for `jobs` as one launch ("" = its choice).
  const Kernel* Choose(const std::vector<std::unique_ptr<TestJob>>& jobs,
                       const std::string& forced = "") {
    absl::StatusOr<const Kernel*> kernel = catalogue_->Select(PackedOf(jobs), forced);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
    return kernel.ok() ? *kernel : nullptr;
  }

  // Runs `jobs` as one launch on `lane` and checks each job's C.
  LaunchTimes RunAndCheck(const std::vector<std::unique_ptr<TestJob>>& jobs, double tolerance,
                          const std::string& forced_kernel = "", int lane = 0) {
    LaunchTimes times;
    const absl::Status status = device_->Run(ToLaunch(jobs, Choose(jobs, forced_kernel)), lane,
                                             &times);
    EXPECT_TRUE(status.ok()) << status;
    if (status.ok()) ExpectAllCorrect(jobs, tolerance);
    return times;
  }

  std::unique_ptr<CudaDevice> device_;
  std::unique_ptr<CudaCatalogue> catalogue_;
};

TEST_F(CudaDeviceTest, DescribesTheGpu) {
  const DeviceDescription& d = device_->description();
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.kind, "cuda");
  EXPECT_TRUE(absl::StartsWith(d.name, "cuda:0 (")) << d.name;
  EXPECT_NE(d.compute_capability.find('.'), std::string::npos) << d.compute_capability;
  EXPECT_GT(d.memory_bytes, 0);
  const std::vector<KernelDescription> kernels = catalogue_->Kernels();
  ASSERT_FALSE(kernels.empty());
  int quantized = 0;
  for (const KernelDescription& k : kernels) {
    EXPECT_NE(k.min_compute_capability.find('.'), std::string::npos) << k.name;
    quantized += k.input == KernelInput::kQuantized ? 1 : 0;
  }
  EXPECT_GE(quantized, 9);  // 6 skinny, 3 square (mma.sync)
  EXPECT_EQ(device_->lanes(), 2);
  const DeviceMemoryUsage memory = device_->memory();
  EXPECT_GT(memory.device_limit_bytes, 0);
  EXPECT_EQ(memory.device_pool_bytes, 0);  // nothing allocated before the first batch
  EXPECT_EQ(memory.pinned_bytes, int64_t{2} * 4 * (4 << 20));
  EXPECT_EQ(device_->max_batch_bytes(), memory.device_limit_bytes / 2 / 2);
  EXPECT_TRUE(device_->healthy());
}

TEST_F(CudaDeviceTest, OneJob) {
  const uint64_t seed = TestSeed(1);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  std::vector<std::unique_ptr<TestJob>> jobs = MakeJobs(Problem(65, 70, 100), 1, rng);
  const LaunchTimes run = RunAndCheck(jobs, kFp32Tolerance);
  EXPECT_GE(run.copy_in, absl::ZeroDuration());
  EXPECT_GT(run.compute, absl::ZeroDuration());
  EXPECT_GE(run.copy_out, absl::ZeroDuration());
  EXPECT_GT(device_->memory().device_pool_bytes, 0);
  EXPECT_TRUE(device_->healthy());
}

// An upload's chunk arrives as runs of any size (gRPC's slices): they are gathered into the
// page-locked bounce buffer and sent a buffer at a time, refilling it past its size. Runs
// that straddle the buffer's end must land byte for byte, and a second write right after
// must not disturb the first.
TEST_F(CudaDeviceTest, ResidentWritesInRunsLandByteForByte) {
  std::mt19937_64 rng(TestSeed(7));
  const size_t total = (size_t{9} << 20) + 4093;  // more than two 4 MiB buffers
  std::string bytes(total, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  std::vector<absl::string_view> runs;
  for (size_t at = 0; at < total;) {
    const size_t n = std::min<size_t>(total - at, 1 + rng() % (size_t{3} << 19));
    runs.push_back(absl::string_view(bytes).substr(at, n));
    at += n;
  }
  absl::StatusOr<void*> resident = device_->AllocateResident(static_cast<int64_t>(2 * total));
  ASSERT_TRUE(resident.ok()) << resident.status();
  char* const at = static_cast<char*>(*resident);
  ASSERT_TRUE(device_->WriteResidentRuns(at, runs).ok());
  ASSERT_TRUE(
      device_->WriteResidentRuns(at + total, {absl::string_view(bytes).substr(0, 100)}).ok());
  std::string back(total + 100, '\1');
  ASSERT_TRUE(device_->ReadResident(back.data(), at, back.size()).ok());
  EXPECT_TRUE(back.compare(0, total, bytes) == 0);
  EXPECT_EQ(back.substr(total), bytes.substr(0, 100));
  EXPECT_TRUE(device_->FreeResident(*resident, static_cast<int64_t>(2 * total)).ok());
  EXPECT_TRUE(device_->healthy());
}

class CudaDeviceBatchTest : public CudaDeviceTest, public ::testing::WithParamInterface<int> {};

TEST_P(CudaDeviceBatchTest, EveryJobGetsItsOwnResult) {
  const uint64_t seed = TestSeed(2);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  std::vector<std::unique_ptr<TestJob>> jobs = MakeJobs(Problem(33, 40, 47), GetParam(), rng);
  RunAndCheck(jobs, kFp32Tolerance);
  EXPECT_EQ(PackedOf(jobs).batch, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaDeviceBatchTest, ::testing::Values(2, 7, 64));

TEST_F(CudaDeviceTest, JobsWithSeveralBatchItems) {
  const uint64_t seed = TestSeed(3);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  std::vector<std::unique_ptr<TestJob>> jobs;
  for (int64_t items : {3, 1, 2, 5}) jobs.push_back(MakeTestJob(Problem(17, 129, 31, items), rng));
  EXPECT_EQ(PackedOf(jobs).batch, 11);
  ASSERT_TRUE(RunOn(*device_, jobs, 0).ok());
  ExpectAllCorrect(jobs, kFp32Tolerance);
}

// Results of 32 KiB come from the allocator's page-locked blocks and are DMA'd into place:
// blocks handed out in turn lie next to each other (one DMA for several), one out of
// order gets its own, and a result in plain memory next to them is still unpacked from
// the staging ring. Each job's C must be its own.
TEST_F(CudaDeviceTest, ResultsInPageLockedBlocksAreCopiedIntoPlace) {
  const uint64_t seed = TestSeed(13);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  const GemmProblem p = Problem(64, 128, 96);
  const size_t c_bytes = static_cast<size_t>(p.ElementsC()) * 4;
  ASSERT_GT(c_bytes, kPinnedBlockMinBytes);
  std::vector<std::unique_ptr<TestJob>> jobs = MakeJobs(p, 6, rng);
  const std::shared_ptr<HostAllocator> allocator = PinnedHostAllocator();
  std::vector<char*> blocks;
  for (int j = 0; j < 5; ++j) {
    blocks.push_back(allocator->Allocate(c_bytes));
    ASSERT_NE(blocks.back(), nullptr);
    ASSERT_TRUE(IsPageLocked(blocks.back()));
    std::memcpy(blocks.back(), jobs[j]->c_out.data(), c_bytes);  // NaN
  }
  EXPECT_EQ(blocks[1], blocks[0] + c_bytes);
  std::swap(blocks[2], blocks[4]);  // jobs 2 and 4 no longer follow their neighbours
  DeviceLaunch launch = ToLaunch(jobs, Choose(jobs));
  for (int j = 0; j < 5; ++j) launch.items[j].host.c_out = blocks[j];
  LaunchTimes times;
  const absl::Status status = device_->Run(launch, 0, &times);
  ASSERT_TRUE(status.ok()) << status;
  for (int j = 0; j < 5; ++j) {
    std::memcpy(jobs[j]->c_out.data(), blocks[j], c_bytes);
    allocator->Free(blocks[j], c_bytes);
  }
  ExpectAllCorrect(jobs, kFp32Tolerance);
}

TEST_F(CudaDeviceTest, BroadcastOperandRunsWithItsOwnStrides) {
  const uint64_t seed = TestSeed(4);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (bool broadcast_a : {false, true}) {
    GemmProblem p = Problem(40, 33, 48, 4);
    (broadcast_a ? p.batch_stride_a : p.batch_stride_b) = 0;
    p.beta = 0.5f;
    ASSERT_FALSE(IsBatchable(p));
    std::vector<std::unique_ptr<TestJob>> jobs;
    jobs.push_back(MakeTestJob(p, rng));
    RunAndCheck(jobs, kFp32Tolerance);
  }
}

TEST_F(CudaDeviceTest, AlphaBetaWithCInAndInPlace) {
  const uint64_t seed = TestSeed(5);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  GemmProblem p = Problem(130, 66, 40, 2);
  p.alpha = 0.5f;
  p.beta = -1.5f;
  std::vector<std::unique_ptr<TestJob>> jobs;
  jobs.push_back(MakeTestJob(p, rng));
  jobs.push_back(MakeTestJob(p, rng, /*in_place=*/true));
  jobs.push_back(MakeTestJob(p, rng));
  RunAndCheck(jobs, kFp32Tolerance);
}

// Operands left in the pieces they arrived in (a request's slices) are gathered by the
// staging ring into the same places as contiguous ones: a batch mixing both, with C_in
// in pieces too, gives every job its own correct result.
TEST_F(CudaDeviceTest, OperandsInPiecesAreGatheredLikeContiguousOnes) {
  const uint64_t seed = TestSeed(11);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  GemmProblem p = Problem(70, 45, 33, 2);
  p.beta = 0.75f;
  std::vector<std::unique_ptr<TestJob>> jobs = MakeJobs(p, 3, rng);
  // Irregular pieces, as HTTP/2 frames cut a message.
  auto cut = [](const std::string& bytes) {
    std::vector<absl::string_view> pieces;
    const size_t sizes[] = {1, 1000, 7, 4093};
    size_t at = 0;
    for (size_t i = 0; at < bytes.size(); ++i) {
      const size_t n = std::min(sizes[i % 4], bytes.size() - at);
      pieces.push_back(absl::string_view(bytes).substr(at, n));
      at += n;
    }
    return pieces;
  };
  Batch batch;
  for (const auto& t : jobs) batch.jobs.push_back(ToJob(*t, nullptr));
  for (size_t j : {size_t{0}, size_t{2}}) {  // job 1 stays contiguous
    Job& job = *batch.jobs[j];
    job.pieces.a = cut(jobs[j]->a);
    job.pieces.b = cut(jobs[j]->b);
    job.pieces.c_in = cut(jobs[j]->c_in);
    job.operands.a = job.operands.b = job.operands.c_in = nullptr;
  }
  batch.problem = PackedProblem(batch.jobs);
  const Kernel* kernel = Choose(jobs);
  for (auto& job : batch.jobs) job->kernel = kernel;
  batch.kernel = kernel;
  LaunchTimes times;
  const absl::Status status = device_->Run(LaunchOf(batch), 0, &times);  // batch outlives it
  ASSERT_TRUE(status.ok()) << status;
  ExpectAllCorrect(jobs, kFp32Tolerance);
}

TEST_F(CudaDeviceTest, Transposes) {
  const uint64_t seed = TestSeed(6);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(absl::StrCat("transpose_a=", ta, " transpose_b=", tb));
      GemmProblem p = Problem(127, 129, 65);
      p.transpose_a = ta;
      p.transpose_b = tb;
      RunAndCheck(MakeJobs(p, 3, rng), kFp32Tolerance);
    }
  }
}

TEST_F(CudaDeviceTest, HalfAndBfloat16InputsOnTheTensorPath) {
  const uint64_t seed = TestSeed(7);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32}) {
    SCOPED_TRACE(DataTypeName(type));
    GemmProblem p = Problem(96, 80, 200);
    p.precision = Precision::kFp16Tensor;
    p.a_type = p.b_type = type;
    RunAndCheck(MakeJobs(p, 4, rng), kTensorTolerance);
  }
}

// FP64 through the device: FLOAT64 operands, C_in and C in the arena as they are (no
// conversion around the kernel), batched jobs with beta and one in place, against the
// long-double reference, with the catalogue's FP64 kernel (the m16n8k16 one on 9.0).
TEST_F(CudaDeviceTest, Float64OnTheFp64TensorCores) {
  const uint64_t seed = TestSeed(12);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  GemmProblem p = Problem(130, 67, 301, /*batch=*/2);
  p.a_type = p.b_type = p.c_type = DataType::kFloat64;
  p.precision = Precision::kFp64;
  p.transpose_b = true;
  p.alpha = 1.0 / 3.0;
  p.beta = -0.1;
  std::vector<std::unique_ptr<TestJob>> jobs = MakeJobs(p, 3, rng);
  jobs.push_back(MakeTestJob(p, rng, /*in_place=*/true));
  const std::string chosen(Choose(jobs)->name());
  EXPECT_TRUE(absl::StartsWith(chosen, "dgemm_dmma")) << chosen;
  RunAndCheck(jobs, 1e-13);
  EXPECT_TRUE(device_->healthy());
}

TEST_F(CudaDeviceTest, ForcedKernelIsUsedAndReported) {
  const uint64_t seed = TestSeed(8);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  int forced = 0;
  for (const KernelDescription& k : catalogue_->Kernels()) {
    if (k.input != KernelInput::kDense) continue;
    GemmProblem p = Problem(64, 130, 300);
    p.precision = k.precision;
    // The BF16 variants only take BF16 inputs; FP32 inputs suit every other one.
    if (absl::StartsWith(k.name, "bgemm")) p.a_type = p.b_type = DataType::kBFloat16;
    const absl::StatusOr<const Kernel*> kernel = catalogue_->Select(p, k.name);
    if (!kernel.ok()) continue;
    SCOPED_TRACE(k.name);
    EXPECT_EQ((*kernel)->name(), k.name);
    RunAndCheck(MakeJobs(p, 3, rng),
                k.precision == Precision::kFp32 ? kFp32Tolerance : kTensorTolerance, k.name);
    ++forced;
  }
  EXPECT_GT(forced, 1);
}

TEST_F(CudaDeviceTest, UnknownForcedKernelIsAPreconditionFailure) {
  std::mt19937_64 rng(TestSeed(9));
  const GemmProblem p = Problem(16, 16, 16);
  absl::StatusOr<const Kernel*> selected = catalogue_->Select(p, "no_such_kernel");
  ASSERT_EQ(selected.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(selected.status().message(), "no GPU kernel named 'no_such_kernel'");

  // A launch of a kernel that is not the device's is refused, and harms nothing.
  class Foreign : public Kernel {
    std::string_view name() const override { return "foreign"; }
    KernelInput input() const override { return KernelInput::kDense; }
    Precision precision() const override { return Precision::kFp32; }
    int min_compute_capability() const override { return 0; }
  } foreign;
  std::vector<std::unique_ptr<TestJob>> jobs = MakeJobs(p, 2, rng);
  LaunchTimes times;
  const absl::Status refused = device_->Run(ToLaunch(jobs, &foreign), 0, &times);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), "kernel foreign is not a CUDA kernel");
  EXPECT_TRUE(device_->healthy());
}

// FP16/BF16 results (and C inputs) are converted around the FP32-output kernels. The
// result is FP32 rounded once to the output type (RNE): within half an output ulp of the
// FP32 result, so the tolerance is the output type's precision on top of the path's.
TEST_F(CudaDeviceTest, Fp16AndBf16OutputsAroundFp32Kernels) {
  const uint64_t seed = TestSeed(10);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  for (DataType out : {DataType::kFloat16, DataType::kBFloat16}) {
    for (Precision precision : {Precision::kFp32, Precision::kFp16Tensor}) {
      SCOPED_TRACE(absl::StrCat(DataTypeName(out), " ", PrecisionName(precision)));
      GemmProblem p = Problem(33, 47, 65, /*batch=*/2);  // odd sizes: unaligned tails
      p.c_type = out;
      p.precision = precision;
      p.alpha = 1.5f;
      p.beta = 0.5f;
      std::vector<std::unique_ptr<TestJob>> jobs = MakeJobs(p, 3, rng);
      jobs.push_back(MakeTestJob(p, rng, /*in_place=*/true));
      ASSERT_TRUE(RunOn(*device_, jobs, 0).ok());
      const double rounding = out == DataType::kFloat16 ? 1e-3 : 8e-3;
      ExpectAllCorrect(jobs, rounding + (precision == Precision::kFp32 ? kFp32Tolerance
                                                                        : kTensorTolerance));
    }
  }
  EXPECT_TRUE(device_->healthy());
}

TEST_F(CudaDeviceTest, TwoLanesRunConcurrently) {
  const uint64_t seed = TestSeed(11);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  // Different shapes per lane, so a result crossing lanes could not pass for correct.
  GemmProblem big = Problem(256, 192, 320);
  big.alpha = 2.0f;
  big.beta = 0.25f;
  const std::vector<std::vector<std::unique_ptr<TestJob>>> lane_jobs = [&] {
    std::vector<std::vector<std::unique_ptr<TestJob>>> out;
    out.push_back(MakeJobs(Problem(64, 48, 80), 16, rng));
    out.push_back(MakeJobs(big, 3, rng));
    return out;
  }();
  constexpr int kIterations = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int lane = 0; lane < 2; ++lane) {
    threads.emplace_back([&, lane] {
      const std::vector<std::unique_ptr<TestJob>>& jobs = lane_jobs[static_cast<size_t>(lane)];
      for (int i = 0; i < kIterations; ++i) {
        for (const auto& t : jobs) t->c_out = NanBytes(t->problem.c_type, t->problem.ElementsC());
        if (!RunOn(*device_, jobs, lane).ok()) {
          ++failures;
          continue;
        }
        for (const auto& t : jobs) {
          if (!(ErrorOf(*t) <= kFp32Tolerance)) ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(device_->healthy());
  const DeviceMemoryUsage memory = device_->memory();
  EXPECT_GT(memory.device_pool_bytes, 0);
  EXPECT_LE(memory.device_pool_bytes, memory.device_limit_bytes);
}

TEST(CudaDeviceCapTest, JobBiggerThanTheCapIsResourceExhausted) {
  SKIP_WITHOUT_GPU();
  CudaDeviceOptions options;
  options.memory_limit_bytes = int64_t{8} << 20;  // 4 MiB per lane
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(0, options);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->max_batch_bytes(), int64_t{2} << 20);
  EXPECT_EQ((*device)->memory().device_limit_bytes, int64_t{8} << 20);

  std::mt19937_64 rng(TestSeed(12));
  std::vector<std::unique_ptr<TestJob>> jobs;
  jobs.push_back(MakeTestJob(Problem(1024, 1024, 1024), rng, false, /*reference=*/false));
  const absl::Status status = RunOn(**device, jobs, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "--device_memory_limit_bytes")) << status;
  EXPECT_TRUE((*device)->healthy());
  EXPECT_LE((*device)->memory().device_pool_bytes, int64_t{8} << 20);

  // The device still serves what fits.
  std::vector<std::unique_ptr<TestJob>> small = MakeJobs(Problem(100, 100, 100), 2, rng);
  ASSERT_TRUE(RunOn(**device, small, 1).ok());
  ExpectAllCorrect(small, kFp32Tolerance);
}

TEST(CudaDeviceStagingTest, LargeJobThroughSmallStagingChunks) {
  SKIP_WITHOUT_GPU();
  CudaDeviceOptions options;
  options.staging_chunk_bytes = 64 << 10;  // A, B and C are 64 chunks each
  options.staging_slots = 2;
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(0, options);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->memory().pinned_bytes, int64_t{2} * 2 * (64 << 10));

  const uint64_t seed = TestSeed(13);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  GemmProblem p = Problem(1024, 1024, 1024);
  p.beta = 1.0f;  // C_in goes through the chunks too
  std::unique_ptr<TestJob> t = MakeTestJob(p, rng, false, /*reference=*/false);
  // A full FP64 reference is 1e9 multiply-adds; rows at the start, across a chunk
  // boundary (16 rows of 4 KiB per chunk) and at the end are enough to catch a
  // misplaced chunk.
  const std::vector<std::pair<int64_t, int64_t>> rows = {
      {0, 3}, {14, 18}, {500, 530}, {1020, 1024}};
  std::vector<std::vector<double>> expected;
  const GemmOperands host{t->a.data(), t->b.data(), t->c_in.data(), nullptr};
  for (const auto& [begin, end] : rows) {
    expected.emplace_back(static_cast<size_t>((end - begin) * p.n));
    ReferenceGemmRows(p, host, 0, begin, end, expected.back().data());
  }
  std::vector<std::unique_ptr<TestJob>> jobs;
  jobs.push_back(std::move(t));
  ASSERT_TRUE(RunOn(**device, jobs, 1).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* c = reinterpret_cast<const float*>(jobs[0]->c_out.data()) + rows[i].first * p.n;
    EXPECT_LE(RelativeError(expected[i].data(), c, DataType::kFloat32,
                            static_cast<int64_t>(expected[i].size())),
              kFp32Tolerance)
        << "rows " << rows[i].first << ".." << rows[i].second;
  }
  // Every element was written (no chunk lost): no NaN left anywhere.
  const float* c = reinterpret_cast<const float*>(jobs[0]->c_out.data());
  int64_t nans = 0;
  for (int64_t i = 0; i < p.m * p.n; ++i) nans += std::isnan(c[i]) ? 1 : 0;
  EXPECT_EQ(nans, 0);

  // Many small jobs coalesce across the small chunks too.
  std::vector<std::unique_ptr<TestJob>> small = MakeJobs(Problem(50, 60, 70), 40, rng);
  ASSERT_TRUE(RunOn(**device, small, 0).ok());
  ExpectAllCorrect(small, kFp32Tolerance);
}

// Many segments of random sizes, some contiguous on the device (coalesced), some not,
// some larger than a slot (split), through a ring of tiny slots, there and back.
TEST(StagingRingTest, RoundTripsScatteredSegments) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = TestSeed(14);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  absl::StatusOr<std::unique_ptr<StagingRing>> ring = StagingRing::Create(3, 1000);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ((*ring)->pinned_bytes(), 3000u);
  absl::StatusOr<gpu::CudaStream> stream = gpu::CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<gpu::DeviceBuffer> device = gpu::DeviceBuffer::Allocate(1 << 20);
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_EQ(cudaMemset(device->get(), 0, 1 << 20), cudaSuccess);

  std::vector<std::string> sources;
  std::vector<std::string> results;
  std::vector<HostToDevice> in;
  std::vector<DeviceToHost> out;
  std::uniform_int_distribution<int> size(0, 2500);
  std::bernoulli_distribution contiguous(0.6);
  sources.reserve(200);
  results.reserve(200);
  size_t at = 0;
  for (int i = 0; i < 200; ++i) {
    const size_t bytes = static_cast<size_t>(size(rng));
    if (!contiguous(rng)) at += 13;
    ASSERT_LT(at + bytes, size_t{1} << 20);
    sources.push_back(RandomBytes(DataType::kInt8, static_cast<int64_t>(bytes), rng));
    results.emplace_back(bytes, '\0');
    char* dst = device->as<char>() + at;
    in.push_back({sources.back().data(), dst, bytes});
    out.push_back({dst, results.back().data(), bytes});
    at += bytes;
  }
  ASSERT_TRUE((*ring)->CopyIn(in, stream->get()).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  ASSERT_TRUE((*ring)->CopyOut(out, stream->get()).ok());
  for (size_t i = 0; i < sources.size(); ++i) ASSERT_EQ(results[i], sources[i]) << "segment " << i;
}

// Big segments through slots whose host side is copied by several threads (HostCopier),
// as the server's lanes do: every byte arrives, there and back.
TEST(StagingRingTest, RoundTripsLargeSegmentsWithHelperThreads) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(TestSeed(16));
  HostCopier copier(3);
  absl::StatusOr<std::unique_ptr<StagingRing>> ring = StagingRing::Create(4, 1 << 20, &copier);
  ASSERT_TRUE(ring.ok()) << ring.status();
  absl::StatusOr<gpu::CudaStream> stream = gpu::CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<gpu::DeviceBuffer> device = gpu::DeviceBuffer::Allocate(24 << 20);
  ASSERT_TRUE(device.ok()) << device.status();
  const std::string a = RandomBytes(DataType::kInt8, (9 << 20) + 7, rng);
  const std::string b = RandomBytes(DataType::kInt8, 5 << 20, rng);
  std::string a_back(a.size(), '\0'), b_back(b.size(), '\0');
  char* base = device->as<char>();
  ASSERT_TRUE(
      (*ring)->CopyIn({{a.data(), base, a.size()}, {b.data(), base + (12 << 20), b.size()}},
                      stream->get())
          .ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  ASSERT_TRUE((*ring)
                  ->CopyOut({{base, a_back.data(), a.size()},
                             {base + (12 << 20), b_back.data(), b.size()}},
                            stream->get())
                  .ok());
  EXPECT_TRUE(a_back == a);
  EXPECT_TRUE(b_back == b);
}

// The point of staging: a batch of many small jobs travels as one DMA each way.
TEST(StagingRingTest, CoalescesContiguousSegmentsAndSplitsLargeOnes) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(TestSeed(15));
  absl::StatusOr<std::unique_ptr<StagingRing>> ring = StagingRing::Create(4, 64 << 10);
  ASSERT_TRUE(ring.ok()) << ring.status();
  absl::StatusOr<gpu::CudaStream> stream = gpu::CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<gpu::DeviceBuffer> device = gpu::DeviceBuffer::Allocate(1 << 20);
  ASSERT_TRUE(device.ok()) << device.status();
  char* base = device->as<char>();

  // 128 jobs' 256-byte operands, back to back on the device: one DMA in, one out.
  std::vector<std::string> jobs;
  std::vector<std::string> results;
  std::vector<HostToDevice> in;
  std::vector<DeviceToHost> out;
  for (int j = 0; j < 128; ++j) {
    jobs.push_back(RandomBytes(DataType::kInt8, 256, rng));
    results.emplace_back(256, '\0');
  }
  for (int j = 0; j < 128; ++j) {
    in.push_back({jobs[j].data(), base + j * 256, 256});
    out.push_back({base + j * 256, results[j].data(), 256});
  }
  ASSERT_TRUE((*ring)->CopyIn(in, stream->get()).ok());
  EXPECT_EQ((*ring)->dmas(), 1);
  ASSERT_TRUE((*ring)->CopyOut(out, stream->get()).ok());
  EXPECT_EQ((*ring)->dmas(), 2);
  EXPECT_EQ(results, jobs);

  // 160 KiB: three slot-sized chunks. A gap before the next segment: its own DMA.
  const std::string large = RandomBytes(DataType::kInt8, 160 << 10, rng);
  const std::string after_gap = RandomBytes(DataType::kInt8, 100, rng);
  ASSERT_TRUE((*ring)
                  ->CopyIn({{large.data(), base, large.size()},
                            {after_gap.data(), base + large.size() + 16, after_gap.size()}},
                           stream->get())
                  .ok());
  EXPECT_EQ((*ring)->dmas(), 2 + 4);
  std::string large_back(large.size(), '\0');
  std::string after_gap_back(after_gap.size(), '\0');
  ASSERT_TRUE((*ring)
                  ->CopyOut({{base, large_back.data(), large.size()},
                             {base + large.size() + 16, after_gap_back.data(), after_gap.size()}},
                            stream->get())
                  .ok());
  EXPECT_EQ((*ring)->dmas(), 2 + 4 + 4);
  EXPECT_EQ(large_back, large);
  EXPECT_EQ(after_gap_back, after_gap);
}

TEST(DeviceMemoryPoolTest, GrowsInStepsUpToTheLaneShare) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kMiB = int64_t{1} << 20;
  DeviceMemoryPool pool(100 * kMiB, 2);  // 50 MiB per lane
  EXPECT_EQ(pool.lane_share_bytes(), 50 * kMiB);
  absl::StatusOr<void*> first = pool.Acquire(0, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(pool.held_bytes(), 2 * kMiB);  // one 2 MiB granule
  absl::StatusOr<void*> same = pool.Acquire(0, 2 * kMiB);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, *first);  // reused, not regrown
  ASSERT_TRUE(pool.Acquire(0, 9 * kMiB).ok());
  EXPECT_EQ(pool.held_bytes(), 10 * kMiB);
  ASSERT_TRUE(pool.Acquire(0, 10 * kMiB + 1).ok());
  EXPECT_EQ(pool.held_bytes(), 14 * kMiB);  // 1.25x of 10 MiB, rounded up to 2 MiB
  ASSERT_TRUE(pool.Acquire(1, 49 * kMiB).ok());
  EXPECT_EQ(pool.held_bytes(), 14 * kMiB + 50 * kMiB);  // capped at the share
  const absl::StatusOr<void*> too_big = pool.Acquire(1, 50 * kMiB + 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(too_big.status().message(), "--device_memory_limit_bytes"));
  EXPECT_LE(pool.held_bytes(), pool.cap_bytes());
  EXPECT_EQ(pool.Acquire(2, 1).status().code(), absl::StatusCode::kInvalidArgument);

  // More than the GPU has, under a cap that allows it: out of memory, not a fault.
  DeviceMemoryPool huge(int64_t{1} << 50, 1);
  EXPECT_EQ(huge.Acquire(0, int64_t{1} << 49).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(huge.Acquire(0, kMiB).ok());
}

TEST(OpenCudaDevicesTest, OpensAllOrTheListedGpus) {
  SKIP_WITHOUT_GPU();
  const int count = CudaDeviceCount();
  ASSERT_GT(count, 0);
  absl::StatusOr<std::vector<std::unique_ptr<Device>>> all = OpenCudaDevices("all", {});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(static_cast<int>(all->size()), count);
  for (int i = 0; i < count; ++i) EXPECT_EQ((*all)[static_cast<size_t>(i)]->description().index, i);
  all->clear();

  absl::StatusOr<std::vector<std::unique_ptr<Device>>> first = OpenCudaDevices("0", {});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0]->description().kind, "cuda");

  absl::StatusOr<std::vector<std::unique_ptr<Device>>> missing = OpenCudaDevices("99", {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), absl::StrCat("has ", count, " GPU")))
      << missing.status();
}

// Syntax errors are reported as such whether or not this machine has a GPU.
TEST(OpenCudaDevicesTest, MalformedListsAreInvalid) {
  for (const char* spec : {"x", "0,0", "", "0,,1", "-1", "1.5", "all,0"}) {
    SCOPED_TRACE(spec);
    EXPECT_EQ(OpenCudaDevices(spec, {}).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(OpenCudaDevicesTest, NoGpuIsAPreconditionFailure) {
  if (::gemmd::testing::HasGpu()) GTEST_SKIP() << "this machine has a GPU: the no-GPU answer is not testable";
  EXPECT_EQ(CudaDeviceCount(), 0);
  absl::StatusOr<std::vector<std::unique_ptr<Device>>> devices = OpenCudaDevices("all", {});
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(devices.status().message(), "no CUDA device found"))
      << devices.status();
}

}  // namespace
}  // namespace gemmd
