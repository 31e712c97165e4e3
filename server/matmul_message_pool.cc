#include "server/matmul_message_pool.h"

#include <utility>

namespace gemmd {

class MatmulMessagePool::Messages
    : public grpc::MessageHolder<gemm::v1::MatmulRequest, gemm::v1::MatmulResponse> {
 public:
  explicit Messages(MatmulMessagePool* pool) : pool_(pool) {
    set_request(&request_);
    set_response(&response_);
  }

  void Release() override { pool_->Return(this); }

  // Clears both messages for the next RPC, keeping the result buffer (length included)
  // aside in spare_.
  void Reset() {
    std::string* c = response_.mutable_c()->mutable_data();
    if (c->capacity() > spare_.capacity()) spare_.swap(*c);
    request_.Clear();
    response_.Clear();
  }

  int64_t RetainedBytes() const { return static_cast<int64_t>(spare_.capacity()); }

  std::string& spare() { return spare_; }

 private:
  MatmulMessagePool* const pool_;
  gemm::v1::MatmulRequest request_;
  gemm::v1::MatmulResponse response_;
  std::string spare_;  // the last result's buffer, length kept
};

MatmulMessagePool::MatmulMessagePool(int64_t max_retained_bytes, size_t max_messages)
    : max_retained_bytes_(max_retained_bytes), max_messages_(max_messages) {}

MatmulMessagePool::~MatmulMessagePool() {
  absl::MutexLock lock(&mu_);
  for (Messages* m : free_) delete m;
}

grpc::MessageHolder<gemm::v1::MatmulRequest, gemm::v1::MatmulResponse>*
MatmulMessagePool::AllocateMessages() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      Messages* m = free_.back();
      free_.pop_back();
      retained_bytes_ -= m->RetainedBytes();
      return m;
    }
  }
  return new Messages(this);
}

void MatmulMessagePool::Return(Messages* messages) {
  messages->Reset();
  const int64_t bytes = messages->RetainedBytes();
  {
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_messages_ && retained_bytes_ + bytes <= max_retained_bytes_) {
      free_.push_back(messages);
      retained_bytes_ += bytes;
      return;
    }
  }
  delete messages;
}

int64_t MatmulMessagePool::retained_bytes() const {
  absl::MutexLock lock(&mu_);
  return retained_bytes_;
}

size_t MatmulMessagePool::pooled() const {
  absl::MutexLock lock(&mu_);
  return free_.size();
}

void MatmulMessagePool::PrepareResultBuffer(grpc::RpcAllocatorState* state, std::string* data,
                                            size_t bytes) {
  auto* messages = dynamic_cast<Messages*>(state);
  if (messages != nullptr && messages->spare().capacity() >= bytes && data->size() < bytes) {
    data->swap(messages->spare());
  }
  data->resize(bytes);  // shrinking writes nothing; growing zero-fills the new tail
}

}  // namespace gemmd
