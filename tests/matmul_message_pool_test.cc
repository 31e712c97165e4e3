#include "server/matmul_message_pool.h"

#include <gtest/gtest.h>

#include <string>

namespace gemmd {
namespace {

using Holder = grpc::MessageHolder<gemm::v1::MatmulRequest, gemm::v1::MatmulResponse>;

TEST(MatmulMessagePoolTest, ReleasedMessagesComeBackClearedWithTheirBuffers) {
  MatmulMessagePool pool(/*max_retained_bytes=*/int64_t{1} << 30, /*max_messages=*/4);
  Holder* h = pool.AllocateMessages();
  h->request()->mutable_a()->set_data(std::string(1 << 20, 'a'));
  h->request()->mutable_a()->add_shape(7);
  std::string* c = h->response()->mutable_c()->mutable_data();
  MatmulMessagePool::PrepareResultBuffer(h, c, 3 << 20);
  EXPECT_EQ(c->size(), size_t{3} << 20);
  h->response()->set_kernel("k");
  h->Release();
  EXPECT_EQ(pool.pooled(), 1u);
  EXPECT_GE(pool.retained_bytes(), 3 << 20);

  Holder* again = pool.AllocateMessages();
  EXPECT_EQ(again, h);  // the same pair, reused
  EXPECT_EQ(again->request()->ByteSizeLong(), 0u);  // nothing of the last call is visible
  EXPECT_EQ(again->response()->ByteSizeLong(), 0u);
  EXPECT_FALSE(again->request()->has_a());
  // A smaller result reuses the last one's buffer: no allocation, exact length.
  std::string* c2 = again->response()->mutable_c()->mutable_data();
  MatmulMessagePool::PrepareResultBuffer(again, c2, 1000);
  EXPECT_EQ(c2->size(), 1000u);
  EXPECT_GE(c2->capacity(), size_t{3} << 20);
  again->Release();
}

TEST(MatmulMessagePoolTest, KeepsNoMoreThanItsLimits) {
  MatmulMessagePool pool(/*max_retained_bytes=*/2 << 20, /*max_messages=*/2);
  Holder* big = pool.AllocateMessages();
  // A result buffer over the byte cap.
  MatmulMessagePool::PrepareResultBuffer(big, big->response()->mutable_c()->mutable_data(),
                                         3 << 20);
  Holder* one = pool.AllocateMessages();
  Holder* two = pool.AllocateMessages();
  Holder* three = pool.AllocateMessages();
  big->Release();  // freed, not kept
  EXPECT_EQ(pool.pooled(), 0u);
  one->Release();
  two->Release();
  three->Release();  // over the count cap: freed
  EXPECT_EQ(pool.pooled(), 2u);
  EXPECT_LE(pool.retained_bytes(), 2 << 20);
}

TEST(MatmulMessagePoolTest, WithoutAPoolTheResultBufferIsAPlainResize) {
  std::string data;
  MatmulMessagePool::PrepareResultBuffer(nullptr, &data, 12);
  EXPECT_EQ(data, std::string(12, '\0'));
}

}  // namespace
}  // namespace gemmd
