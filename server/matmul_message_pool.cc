#include "server/matmul_message_pool.h"

#include <utility>

namespace gemmd {

bool RetainedResultBytes::TryRetain(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes_ + bytes > max_bytes_) return false;
  bytes_ += bytes;
  return true;
}

void RetainedResultBytes::Release(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  bytes_ -= bytes;
}

int64_t RetainedResultBytes::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

template <typename Request>
class MatmulMessagePool<Request>::Messages
    : public grpc::MessageHolder<Request, gemm::v1::MatmulResponse>,
      public PooledResultBuffer {
 public:
  explicit Messages(MatmulMessagePool* pool) : pool_(pool) {
    this->set_request(&request_);
    this->set_response(&response_);
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

 private:
  MatmulMessagePool* const pool_;
  Request request_;
  gemm::v1::MatmulResponse response_;
};

template <typename Request>
MatmulMessagePool<Request>::MatmulMessagePool(RetainedResultBytes* budget, size_t max_messages)
    : budget_(budget), max_messages_(max_messages) {}

template <typename Request>
MatmulMessagePool<Request>::~MatmulMessagePool() {
  absl::MutexLock lock(&mu_);
  for (Messages* m : free_) {
    budget_->Release(m->RetainedBytes());
    delete m;
  }
}

template <typename Request>
grpc::MessageHolder<Request, gemm::v1::MatmulResponse>*
MatmulMessagePool<Request>::AllocateMessages() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      Messages* m = free_.back();
      free_.pop_back();
      budget_->Release(m->RetainedBytes());
      return m;
    }
  }
  return new Messages(this);
}

template <typename Request>
void MatmulMessagePool<Request>::Return(Messages* messages) {
  messages->Reset();
  {
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_messages_ && budget_->TryRetain(messages->RetainedBytes())) {
      free_.push_back(messages);
      return;
    }
  }
  delete messages;
}

template <typename Request>
size_t MatmulMessagePool<Request>::pooled() const {
  absl::MutexLock lock(&mu_);
  return free_.size();
}

template class MatmulMessagePool<gemm::v1::MatmulRequest>;
template class MatmulMessagePool<gemm::v1::QuantizedMatmulRequest>;

void PrepareResultBuffer(grpc::RpcAllocatorState* state, std::string* data, size_t bytes) {
  auto* pooled = dynamic_cast<PooledResultBuffer*>(state);
  if (pooled != nullptr && pooled->spare().capacity() >= bytes && data->size() < bytes) {
    data->swap(pooled->spare());
  }
  data->resize(bytes);  // shrinking writes nothing; growing zero-fills the new tail
}

}  // namespace gemmd
