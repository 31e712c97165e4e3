#include "server/rpc/response_encoding.h"

#include <gtest/gtest.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstring>
#include <string>
#include <vector>

#include "server/rpc/host_memory.h"

namespace gemmd {
namespace {

// The wire bytes as one string, as a client receives them.
std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// The three-slice encoding parses, with the generated code, into the message it stands
// for, whatever the sizes (lengths from 1 to 3 varint bytes), and the result buffer goes
// back to its HostMemory when the last slice is gone.
TEST(ResponseEncodingTest, ParsesAsTheMessageAndReleasesTheBuffer) {
  auto memory = HostMemory::Create(0, 1 << 24);
  for (size_t bytes : {size_t{4}, size_t{200}, size_t{3} << 20}) {
    absl::StatusOr<std::unique_ptr<HostBuffer>> result = memory->AcquireBuffer(bytes);
    ASSERT_TRUE(result.ok());
    for (size_t i = 0; i < bytes; ++i) (*result)->data()[i] = static_cast<char>(i * 7 + 1);
    const std::string expected((*result)->data(), bytes);
    gemm::v1::Tensor head;
    head.add_shape(1);
    head.add_shape(static_cast<int64_t>(bytes / 4));
    head.set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
    gemm::v1::MatmulResponse rest;
    rest.set_kernel("cpu_sgemm_openblas");
    rest.set_device("cpu:0");
    rest.set_precision(gemm::v1::PRECISION_FP32);
    rest.mutable_timing()->set_total_us(1234);
    rest.mutable_timing()->set_batch_size(3);
    std::string wire;
    {
      const grpc::ByteBuffer encoded = EncodeMatmulResponse(head, *std::move(result), rest);
      EXPECT_EQ(memory->reserved_bytes(), static_cast<int64_t>(bytes));  // still in use
      wire = Flatten(encoded);
    }
    EXPECT_EQ(memory->reserved_bytes(), 0);  // the slice let go: back in the pool
    EXPECT_EQ(memory->pooled_bytes(), static_cast<int64_t>(bytes));
    gemm::v1::MatmulResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire)) << bytes;
    EXPECT_EQ(parsed.c().shape_size(), 2);
    EXPECT_EQ(parsed.c().shape(1), static_cast<int64_t>(bytes / 4));
    EXPECT_EQ(parsed.c().dtype(), gemm::v1::DATA_TYPE_FLOAT32);
    EXPECT_EQ(parsed.c().data(), expected);
    EXPECT_EQ(parsed.kernel(), "cpu_sgemm_openblas");
    EXPECT_EQ(parsed.device(), "cpu:0");
    EXPECT_EQ(parsed.precision(), gemm::v1::PRECISION_FP32);
    EXPECT_EQ(parsed.timing().total_us(), 1234);
    EXPECT_EQ(parsed.timing().batch_size(), 3u);
    // Byte for byte what the generated serializer would write, modulo field order.
    gemm::v1::MatmulResponse whole = rest;
    *whole.mutable_c() = head;
    whole.mutable_c()->set_data(expected);
    EXPECT_EQ(wire.size(), whole.ByteSizeLong());
    memory = HostMemory::Create(0, 1 << 24);
  }
}

}  // namespace
}  // namespace gemmd
