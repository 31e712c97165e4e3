// A striped Matmul in row blocks (striped_call.h says when and how).
#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/striped_call.h"
#include "client/striped_call_internal.h"

namespace gemmd {

using striped_internal::ElementBytes;
using striped_internal::kLabel;
using striped_internal::MatmulCBytes;
using striped_internal::OutputDtype;
using striped_internal::TtlFor;

int StripedCall::RowBlocksFor(const MatmulArgs& args, const CallOptions& options) const {
  if (options.row_blocks == 1 || no_row_plans_.load(std::memory_order_relaxed)) return 1;
  if (!args.a_ref.empty() || !args.b_ref.empty() || !args.c_ref.empty() || args.c || args.keep_c ||
      args.c_shm.set() || args.a.shm.set() || args.b.shm.set() || args.transpose_a ||
      args.beta != 0.0f || args.a.shape.size() != 2 || args.b.shape.size() != 2) {
    return 1;
  }
  const int64_t m = args.a.shape[0];
  const int64_t k = args.a.shape[1];
  // A malformed A is the server's to refuse, whole.
  if (m < 1 || k < 1 ||
      static_cast<int64_t>(args.a.data.size()) != m * k * ElementBytes(args.a.dtype)) {
    return 1;
  }
  // As Run stripes them: forced stripes stripe every operand, chosen ones only the large.
  const int64_t least = options.stripes >= 2 ? 1 : kStripeOperandBytes;
  if (static_cast<int64_t>(args.b.data.size()) < least || MatmulCBytes(args) < least) return 1;
  const int requested = options.row_blocks > 0 ? options.row_blocks : kDefaultRowBlocks;
  const int64_t most = (m + kRowPlanAlign - 1) / kRowPlanAlign;
  const int blocks = static_cast<int>(std::min<int64_t>({requested, most, kMaxRowBlocks}));
  return blocks >= 2 ? blocks : 1;
}

absl::Status StripedCall::MatmulInBlocks(const MatmulArgs& args, const CallOptions& options,
                                         int stripes, int blocks, bool* put_failed, bool* unplanned,
                                         MatmulResult* result) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.timeout;
  result->striped_steps_.reset();
  const int64_t m = args.a.shape[0];
  const int64_t k = args.a.shape[1];
  const int64_t n = args.transpose_b ? args.b.shape[0] : args.b.shape[1];
  const int64_t a_row_bytes = k * ElementBytes(args.a.dtype);
  const int64_t c_row_bytes = n * ElementBytes(OutputDtype(args));
  // Whole panels of kRowPlanAlign rows, the last block whatever is left.
  const int64_t block_rows =
      ((m + blocks - 1) / blocks + kRowPlanAlign - 1) / kRowPlanAlign * kRowPlanAlign;
  const int count = static_cast<int>((m + block_rows - 1) / block_rows);
  auto rows_of = [&](int i) { return std::min(block_rows, m - i * block_rows); };

  const size_t c_bytes = static_cast<size_t>(m * c_row_bytes);
  absl::StatusOr<char*> buffer = BufferForC(options, c_bytes, result);
  if (!buffer.ok()) return buffer.status();
  char* const out = *buffer;  // each block reads its rows into it

  StripedSteps steps;
  steps.row_blocks = count;
  absl::Status status;
  absl::Time cleanup_start;
  {
    Temporaries temporaries(this);
    std::string device;  // B's: every block goes there too
    // Puts `tensor` as a temporary (opened, then its parts sent on connections [0,
    // stripes)); its handle in *handle.
    auto put = [&](const TensorRef& tensor, std::string* handle) -> absl::Status {
      absl::StatusOr<TensorStoreClient::OpenedTensor> open =
          OpenTemporary(tensor, options, stripes, deadline, device, &temporaries);
      if (!open.ok()) return open.status();
      if (device.empty()) device = open->stored.device;
      *handle = open->stored.handle;
      return store_.SendParts({*open});
    };
    auto block_of_a = [&](int i) {
      TensorRef block = args.a;
      block.shape = {rows_of(i), k};
      block.data = args.a.data.substr(static_cast<size_t>(i * block_rows * a_row_bytes),
                                      static_cast<size_t>(rows_of(i) * a_row_bytes));
      return block;
    };

    std::string b_handle;
    std::vector<std::string> a_handles(static_cast<size_t>(count));
    status = put(args.b, &b_handle);
    if (status.ok()) status = put(block_of_a(0), &a_handles[0]);
    *put_failed = !status.ok();
    steps.put = absl::Now() - start;

    // Three stages at once, each in block order: A's blocks go up (a thread), each
    // block's Matmul runs once its A is up (this thread), and each block's C is read back
    // once computed (a thread). The first failure stops all three.
    struct Pipeline {
      absl::Mutex mu;
      int uploaded ABSL_GUARDED_BY(mu) = 1;  // A's blocks [0, uploaded) are on the server
      int computed ABSL_GUARDED_BY(mu) = 0;  // C's blocks [0, computed) are
      std::vector<std::string> a_handles ABSL_GUARDED_BY(mu);
      std::vector<std::string> c_handles ABSL_GUARDED_BY(mu);
      absl::Status failed ABSL_GUARDED_BY(mu);
      bool failed_in_put ABSL_GUARDED_BY(mu) = false;
      absl::CondVar changed;

      void Fail(absl::Status s, bool in_put) {
        absl::MutexLock lock(&mu);
        if (failed.ok()) {
          failed = std::move(s);
          failed_in_put = in_put;
        }
        changed.SignalAll();
      }
      // Waits until `*count` passes `i` (true) or a stage failed (false).
      bool WaitFor(const int* count, int i) {
        absl::MutexLock lock(&mu);
        while (*count <= i && failed.ok()) changed.Wait(&mu);
        return *count > i;
      }
    } pipe;
    {
      absl::MutexLock lock(&pipe.mu);
      pipe.a_handles = std::move(a_handles);
      pipe.c_handles.resize(static_cast<size_t>(count));
      if (!status.ok()) pipe.failed = status;
    }
    std::thread uploader;
    std::thread reader;
    gemm::v1::MatmulResponse first;  // the first block's answer: the call's
    gemm::v1::Timing timing;         // every block's, added
    if (status.ok()) {
      uploader = std::thread([&] {
        for (int i = 1; i < count; ++i) {
          {
            absl::MutexLock lock(&pipe.mu);
            if (!pipe.failed.ok()) return;
          }
          std::string handle;
          if (absl::Status s = put(block_of_a(i), &handle); !s.ok()) {
            pipe.Fail(std::move(s), /*in_put=*/true);
            return;
          }
          absl::MutexLock lock(&pipe.mu);
          pipe.a_handles[static_cast<size_t>(i)] = std::move(handle);
          pipe.uploaded = i + 1;
          pipe.changed.SignalAll();
        }
      });
      reader = std::thread([&] {
        for (int i = 0; i < count; ++i) {
          if (!pipe.WaitFor(&pipe.computed, i)) return;
          std::string handle;
          {
            absl::MutexLock lock(&pipe.mu);
            handle = pipe.c_handles[static_cast<size_t>(i)];
          }
          const TensorRows rows{rows_of(i), c_row_bytes, 0};
          absl::Status s =
              store_
                  .ReadInto(handle, rows,
                            absl::MakeSpan(out + i * block_rows * c_row_bytes,
                                           static_cast<size_t>(rows.data_bytes())),
                            {}, UploadConnections(rows.data_bytes(), rows.rows, stripes),
                            deadline - absl::Now(), /*first_connection=*/stripes)
                  .status();
          if (!s.ok()) {
            pipe.Fail(std::move(s), /*in_put=*/false);
            return;
          }
        }
      });

      // The blocks' Matmuls on a connection of their own, past the uploads' and the reads'.
      GemmClient calls(pool_->Channel(2 * stripes));
      for (int i = 0; i < count; ++i) {
        if (!pipe.WaitFor(&pipe.uploaded, i)) break;
        const int64_t row0 = i * block_rows;
        MatmulArgs inner = args;
        {
          absl::MutexLock lock(&pipe.mu);
          inner.a_ref = pipe.a_handles[static_cast<size_t>(i)];
        }
        inner.b_ref = b_handle;
        inner.keep_c = KeepResult{TtlFor(options.timeout), kLabel, /*temporary=*/true};
        inner.row_plan.emplace();
        inner.row_plan->set_rows(m);
        inner.row_plan->set_offset(row0);
        CallOptions one = options;
        one.stripes = 1;
        one.c_out = {};
        one.timeout = deadline - absl::Now();
        one.continues = temporaries.first();
        MatmulResult block;
        const absl::Time called = absl::Now();
        absl::Status s = calls.Matmul(inner, one, &block);
        steps.call += absl::Now() - called;
        if (s.ok()) temporaries.Add(block.info_.c_ref().handle());
        if (s.ok() && (!block.info_.has_row_plan() || block.info_.row_plan().rows() != m ||
                       block.info_.row_plan().offset() != row0)) {
          *unplanned = true;
          s = absl::FailedPreconditionError(
              "the server answered a row block without its row plan (it does not know them)");
        }
        const google::protobuf::RepeatedField<int64_t>& shape = block.info_.c().shape();
        if (s.ok() && (shape.size() != 2 || shape[0] != rows_of(i) || shape[1] != n)) {
          s = absl::InternalError(absl::StrCat("the block's C [", absl::StrJoin(shape, ","),
                                               "] is not its ", rows_of(i), " rows of C"));
        }
        if (!s.ok()) {
          pipe.Fail(std::move(s), /*in_put=*/false);
          break;
        }
        if (i == 0) first = block.info_;
        const gemm::v1::Timing& t = block.info_.timing();
        timing.set_queue_us(timing.queue_us() + t.queue_us());
        timing.set_copy_in_us(timing.copy_in_us() + t.copy_in_us());
        timing.set_compute_us(timing.compute_us() + t.compute_us());
        timing.set_copy_out_us(timing.copy_out_us() + t.copy_out_us());
        timing.set_total_us(timing.total_us() + t.total_us());
        absl::MutexLock lock(&pipe.mu);
        pipe.c_handles[static_cast<size_t>(i)] = block.info_.c_ref().handle();
        pipe.computed = i + 1;
        pipe.changed.SignalAll();
      }
      uploader.join();
      reader.join();
      absl::MutexLock lock(&pipe.mu);
      status = pipe.failed;
      if (pipe.failed_in_put) *put_failed = true;
    }
    if (status.ok()) {
      // As the one-connection call answers: C's shape and dtype, no handle, no plan; the
      // server's times are the blocks' together.
      result->info_ = std::move(first);
      result->info_.clear_c_ref();
      result->info_.clear_row_plan();
      result->info_.mutable_c()->clear_shape();
      result->info_.mutable_c()->add_shape(m);
      result->info_.mutable_c()->add_shape(n);
      timing.set_batch_size(1);
      *result->info_.mutable_timing() = timing;
      result->c_ = absl::string_view(out, c_bytes);
      steps.get = absl::Now() - start - steps.put - steps.call;
    }
    if (status.ok()) temporaries.Succeeded();
    cleanup_start = absl::Now();
  }
  if (!status.ok()) return status;
  steps.cleanup = absl::Now() - cleanup_start;
  result->striped_steps_ = steps;
  return status;
}

}  // namespace gemmd
