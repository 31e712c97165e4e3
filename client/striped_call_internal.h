// What the striped call's two files share (striped_call.cc, the whole call, and
// striped_row_blocks.cc, the call in row blocks); not part of the client's API.
#ifndef GEMMD_CLIENT_STRIPED_CALL_INTERNAL_H_
#define GEMMD_CLIENT_STRIPED_CALL_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "client/striped_call.h"
#include "gemm/v1/gemm.pb.h"

namespace gemmd {
namespace striped_internal {

// The label every temporary carries (ListTensors shows it).
inline constexpr char kLabel[] = "striped call";

// Bytes of one element of `type` (UNSPECIFIED is FLOAT32).
int64_t ElementBytes(gemm::v1::DataType type);
// The dtype of the C the server answers `args` with: output_dtype, or where unset FLOAT64
// for an FP64 product and FLOAT32 otherwise.
gemm::v1::DataType OutputDtype(const MatmulArgs& args);
// C's bytes, where the client can tell them from the inline operands; -1 where it cannot
// (an operand by handle, a shape the server will refuse anyway).
int64_t MatmulCBytes(const MatmulArgs& args);
// A temporary lives as long as the call may: past its deadline nobody reads it.
uint32_t TtlFor(absl::Duration timeout);

}  // namespace striped_internal

// The temporaries of one call: put, then deleted when it ends. After a call that
// succeeded the deletes go out without waiting (the caller has C; the server frees the
// memory a round trip later); after a failure they are waited for, so a call made again
// on one connection finds their room free.
class StripedCall::Temporaries {
 public:
  explicit Temporaries(StripedCall* owner) : owner_(owner) {}
  ~Temporaries();
  // Thread-safe (a call in row blocks puts A's blocks on a thread of its own).
  void Add(std::string handle);
  void Succeeded() { succeeded_ = true; }
  // One the call made, which its later RPCs name (gemmd-continues) so a server that
  // starts draining serves the call to its end; empty before the first.
  std::string first() const;

 private:
  StripedCall* const owner_;
  mutable absl::Mutex mu_;
  std::vector<std::string> handles_ ABSL_GUARDED_BY(mu_);
  bool succeeded_ = false;
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_STRIPED_CALL_INTERNAL_H_
