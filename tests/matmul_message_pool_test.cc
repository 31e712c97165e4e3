#include "server/matmul_message_pool.h"

#include <gtest/gtest.h>

#include <string>

namespace gemmd {
namespace {

using Holder = grpc::MessageHolder<gemm::v1::MatmulRequest, gemm::v1::MatmulResponse>;
using QuantizedHolder =
    grpc::MessageHolder<gemm::v1::QuantizedMatmulRequest, gemm::v1::MatmulResponse>;
using Pool = MatmulMessagePool<gemm::v1::MatmulRequest>;
using QuantizedPool = MatmulMessagePool<gemm::v1::QuantizedMatmulRequest>;

TEST(MatmulMessagePoolTest, ReleasedMessagesComeBackClearedWithTheirBuffers) {
  RetainedResultBytes budget(int64_t{1} << 30);
  Pool pool(&budget, /*max_messages=*/4);
  Holder* h = pool.AllocateMessages();
  h->request()->mutable_a()->set_data(std::string(1 << 20, 'a'));
  h->request()->mutable_a()->add_shape(7);
  std::string* c = h->response()->mutable_c()->mutable_data();
  PrepareResultBuffer(h, c, 3 << 20);
  EXPECT_EQ(c->size(), size_t{3} << 20);
  h->response()->set_kernel("k");
  h->Release();
  EXPECT_EQ(pool.pooled(), 1u);
  EXPECT_GE(budget.bytes(), 3 << 20);

  Holder* again = pool.AllocateMessages();
  EXPECT_EQ(again, h);  // the same pair, reused
  EXPECT_EQ(again->request()->ByteSizeLong(), 0u);  // nothing of the last call is visible
  EXPECT_EQ(again->response()->ByteSizeLong(), 0u);
  EXPECT_FALSE(again->request()->has_a());
  // A smaller result reuses the last one's buffer: no allocation, exact length.
  std::string* c2 = again->response()->mutable_c()->mutable_data();
  PrepareResultBuffer(again, c2, 1000);
  EXPECT_EQ(c2->size(), 1000u);
  EXPECT_GE(c2->capacity(), size_t{3} << 20);
  EXPECT_EQ(budget.bytes(), 0);  // a pair in use counts against no pool
  again->Release();
}

TEST(MatmulMessagePoolTest, QuantizedMatmulMessagesArePooledAlike) {
  RetainedResultBytes budget(int64_t{1} << 30);
  QuantizedPool pool(&budget, /*max_messages=*/4);
  QuantizedHolder* h = pool.AllocateMessages();
  h->request()->mutable_b()->set_data(std::string(1000, 'b'));
  std::string* c = h->response()->mutable_c()->mutable_data();
  PrepareResultBuffer(h, c, 2 << 20);
  const char* buffer = c->data();
  h->Release();
  EXPECT_EQ(pool.pooled(), 1u);
  EXPECT_GE(budget.bytes(), 2 << 20);

  QuantizedHolder* again = pool.AllocateMessages();
  EXPECT_EQ(again, h);
  EXPECT_FALSE(again->request()->has_b());
  std::string* c2 = again->response()->mutable_c()->mutable_data();
  PrepareResultBuffer(again, c2, 2 << 20);
  EXPECT_EQ(c2->data(), buffer);  // the very same buffer: no allocation, no page faults
  EXPECT_EQ(c2->size(), size_t{2} << 20);
  again->Release();
}

TEST(MatmulMessagePoolTest, PoolsShareOneByteBudget) {
  RetainedResultBytes budget(3 << 20);
  Pool matmul(&budget, /*max_messages=*/4);
  QuantizedPool quantized(&budget, /*max_messages=*/4);
  Holder* m = matmul.AllocateMessages();
  PrepareResultBuffer(m, m->response()->mutable_c()->mutable_data(), 2 << 20);
  QuantizedHolder* q = quantized.AllocateMessages();
  PrepareResultBuffer(q, q->response()->mutable_c()->mutable_data(), 2 << 20);
  m->Release();  // kept: 2 MiB of 3
  EXPECT_EQ(matmul.pooled(), 1u);
  q->Release();  // 4 MiB would pass the shared cap: freed
  EXPECT_EQ(quantized.pooled(), 0u);
  EXPECT_LE(budget.bytes(), 3 << 20);
  EXPECT_GE(budget.bytes(), 2 << 20);
}

TEST(MatmulMessagePoolTest, KeepsNoMoreThanItsLimits) {
  RetainedResultBytes budget(2 << 20);
  Pool pool(&budget, /*max_messages=*/2);
  Holder* big = pool.AllocateMessages();
  // A result buffer over the byte cap.
  PrepareResultBuffer(big, big->response()->mutable_c()->mutable_data(), 3 << 20);
  Holder* one = pool.AllocateMessages();
  Holder* two = pool.AllocateMessages();
  Holder* three = pool.AllocateMessages();
  big->Release();  // freed, not kept
  EXPECT_EQ(pool.pooled(), 0u);
  one->Release();
  two->Release();
  three->Release();  // over the count cap: freed
  EXPECT_EQ(pool.pooled(), 2u);
  EXPECT_LE(budget.bytes(), 2 << 20);
}

TEST(MatmulMessagePoolTest, WithoutAPoolTheResultBufferIsAPlainResize) {
  std::string data;
  PrepareResultBuffer(nullptr, &data, 12);
  EXPECT_EQ(data, std::string(12, '\0'));
}

}  // namespace
}  // namespace gemmd
