// Reused request/response messages for the RPCs that answer a MatmulResponse (Matmul and
// QuantizedMatmul; gRPC MessageAllocators).
//
// Why: operands and results are large (a 4096^2 FP32 result is 64 MiB), and a fresh
// buffer of that size comes straight from mmap: every page faults on first touch, and
// zero-filling the result before the device overwrites it costs as much again. Measured
// on the H200 host that was ~33 ms per 4096^3 request before any useful work, five times
// the copies and the kernel together; on the CPU backend a 4096x4096 QuantizedMatmul
// result paid 41-53 ms on every call until its RPC got a pool too. A pooled pair keeps
// its last result buffer, length included, so sizing the next result writes nothing
// when it is no longer. (Request buffers are not kept: protobuf's Clear() frees
// sub-messages, and keeping them would make a missing tensor look present.) A pool holds
// at most `max_messages` pairs; all pools together keep at most the bytes of their shared
// RetainedResultBytes; a pair over either limit is freed instead. Thread-safe.
#ifndef GEMMD_SERVER_MATMUL_MESSAGE_POOL_H_
#define GEMMD_SERVER_MATMUL_MESSAGE_POOL_H_

#include <grpcpp/support/message_allocator.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gemm/v1/gemm.pb.h"

namespace gemmd {

// The result-buffer bytes the pools keep, under one cap (--message_pool_bytes).
class RetainedResultBytes {
 public:
  explicit RetainedResultBytes(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // Counts `bytes` more if that stays within the cap; false (and nothing counted) if not.
  bool TryRetain(int64_t bytes);
  void Release(int64_t bytes);
  int64_t bytes() const;

 private:
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// What a pooled message pair keeps between calls: the last result's buffer.
class PooledResultBuffer {
 public:
  virtual ~PooledResultBuffer() = default;
  std::string& spare() { return spare_; }
  int64_t RetainedBytes() const { return static_cast<int64_t>(spare_.capacity()); }

 protected:
  std::string spare_;  // the last result's buffer, length kept
};

template <typename Request>
class MatmulMessagePool
    : public grpc::MessageAllocator<Request, gemm::v1::MatmulResponse> {
 public:
  // `budget` is shared with the server's other pools and outlives this one.
  MatmulMessagePool(RetainedResultBytes* budget, size_t max_messages);
  ~MatmulMessagePool() override;

  grpc::MessageHolder<Request, gemm::v1::MatmulResponse>* AllocateMessages() override;

  size_t pooled() const;

 private:
  class Messages;
  void Return(Messages* messages);

  RetainedResultBytes* const budget_;
  const size_t max_messages_;
  mutable absl::Mutex mu_;
  std::vector<Messages*> free_ ABSL_GUARDED_BY(mu_);
};

extern template class MatmulMessagePool<gemm::v1::MatmulRequest>;
extern template class MatmulMessagePool<gemm::v1::QuantizedMatmulRequest>;

// Makes `*data` (a response's C bytes) exactly `bytes` long for the device to overwrite.
// With pooled messages (`state` from the context's GetRpcAllocatorState) it starts from
// the previous result's buffer, so nothing is allocated or zero-filled when that was at
// least as long; otherwise (state null or not a pool's) it is a plain resize.
void PrepareResultBuffer(grpc::RpcAllocatorState* state, std::string* data, size_t bytes);

}  // namespace gemmd

#endif  // GEMMD_SERVER_MATMUL_MESSAGE_POOL_H_
