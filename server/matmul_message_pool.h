// Reused request/response messages for Matmul (a gRPC MessageAllocator).
//
// Why: operands and results are large (a 4096^2 FP32 result is 64 MiB), and a fresh
// buffer of that size comes straight from mmap: every page faults on first touch, and
// zero-filling the result before the device overwrites it costs as much again. Measured
// on the H200 host that was ~33 ms per 4096^3 request before any useful work, five times
// the copies and the kernel together. A pooled pair keeps its last result buffer, length
// included, so sizing the next result writes nothing when it is no longer. (Request
// buffers are not kept: protobuf's Clear() frees sub-messages, and keeping them would
// make a missing tensor look present.) The pool holds at most `max_messages` pairs and
// `max_retained_bytes` of buffers; a pair over either limit is freed instead.
// Thread-safe.
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

class MatmulMessagePool
    : public grpc::MessageAllocator<gemm::v1::MatmulRequest, gemm::v1::MatmulResponse> {
 public:
  MatmulMessagePool(int64_t max_retained_bytes, size_t max_messages);
  ~MatmulMessagePool() override;

  grpc::MessageHolder<gemm::v1::MatmulRequest, gemm::v1::MatmulResponse>* AllocateMessages()
      override;

  int64_t retained_bytes() const;
  size_t pooled() const;

  // Makes `*data` (a response's C bytes) exactly `bytes` long for the device to
  // overwrite. With pooled messages (`state` from the context's GetRpcAllocatorState) it
  // starts from the previous result's buffer, so nothing is allocated or zero-filled when
  // that was at least as long; otherwise (state null) it is a plain resize.
  static void PrepareResultBuffer(grpc::RpcAllocatorState* state, std::string* data,
                                  size_t bytes);

 private:
  class Messages;
  void Return(Messages* messages);

  const int64_t max_retained_bytes_;
  const size_t max_messages_;
  mutable absl::Mutex mu_;
  std::vector<Messages*> free_ ABSL_GUARDED_BY(mu_);
  int64_t retained_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_MATMUL_MESSAGE_POOL_H_
