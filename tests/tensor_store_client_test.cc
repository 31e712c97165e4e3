// Resident tensors through the C++ client library (client/tensor_store_client.h and the
// refs of gemm_client.h) against a whole server in-process: uploads read back byte for
// byte (dense and quantized, one chunk and many, one connection and three parts),
// Matmul / QuantizedMatmul by handle equal to the same call inline, C kept on the
// server, a deleted tensor NOT_FOUND, ListTensors. The pure pieces (row split, chunk
// encoding) are checked against the generated protobuf code.
#include "client/tensor_store_client.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/tensor_chunks.h"
#include "kernels/quant_formats.h"
#include "tests/client_calls.h"
#include "tests/metrics_util.h"
#include "tests/server_fixture.h"

namespace gemmd::testing {
namespace {

// A quantized [rows, k] tensor of N(0,1) values, owning its bytes.
struct Quantized {
  Int8Matrix int8;
  Nvfp4Matrix nvfp4;
  QuantizedTensorRef ref;
};

std::unique_ptr<Quantized> MakeQuantized(gemm::v1::QuantFormat format, int64_t rows, int64_t k,
                                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (float& v : x) v = normal(rng);
  auto q = std::make_unique<Quantized>();
  q->ref.shape = {rows, k};
  q->ref.format = format;
  if (format == gemm::v1::QUANT_FORMAT_INT8) {
    q->int8 = *QuantizeInt8(x.data(), rows, k);
    q->ref.data = Bytes(q->int8.values);
    q->ref.scales = Bytes(q->int8.scales);
    q->ref.tensor_scale = 0.0f;
  } else {
    q->nvfp4 = *QuantizeNvfp4(x.data(), rows, k);
    q->ref.data = Bytes(q->nvfp4.packed);
    q->ref.scales = Bytes(q->nvfp4.block_scales);
    q->ref.tensor_scale = q->nvfp4.tensor_scale;
  }
  return q;
}

class TensorStoreClientTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    Start();
    target_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  // Parts go over connections of their own, as they would to a remote server.
  TensorStoreClient Store() {
    const std::string target = target_;
    return TensorStoreClient(channel_,
                             [target](int index) { return ConnectChannel(target, 1 + index); });
  }

  std::string target_;
};

void ExpectDenseRoundTrip(TensorStoreClient& store, const TensorRef& t, const PutOptions& put) {
  absl::StatusOr<std::string> handle = store.PutTensor(t, put);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_FALSE(handle->empty());
  absl::StatusOr<DownloadedTensor> got = store.GetTensor(*handle);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::vector<int64_t>(got->header.shape().begin(), got->header.shape().end()),
            t.shape);
  EXPECT_EQ(got->header.dtype(), t.dtype);
  EXPECT_EQ(got->header.format(), gemm::v1::QUANT_FORMAT_UNSPECIFIED);
  EXPECT_EQ(got->header.label(), put.label);
  EXPECT_TRUE(got->data == t.data) << "the data read back differs";
  EXPECT_TRUE(got->scales.empty());
  EXPECT_TRUE(store.DeleteTensor(*handle).ok());
}

void ExpectQuantizedRoundTrip(TensorStoreClient& store, const QuantizedTensorRef& t,
                              const PutOptions& put) {
  absl::StatusOr<std::string> handle = store.PutTensor(t, put);
  ASSERT_TRUE(handle.ok()) << handle.status();
  absl::StatusOr<DownloadedTensor> got = store.GetTensor(*handle);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::vector<int64_t>(got->header.shape().begin(), got->header.shape().end()),
            t.shape);
  EXPECT_EQ(got->header.format(), t.format);
  if (t.format == gemm::v1::QUANT_FORMAT_NVFP4) {
    EXPECT_EQ(got->header.tensor_scale(), t.tensor_scale);
  }
  EXPECT_TRUE(got->data == t.data) << "the data read back differs";
  EXPECT_TRUE(got->scales == t.scales) << "the scales read back differ";
  EXPECT_TRUE(store.DeleteTensor(*handle).ok());
}

TEST_F(TensorStoreClientTest, DenseTensorsReadBackByteForByte) {
  TensorStoreClient store = Store();
  const std::string small = Random(DataType::kFloat32, 37 * 21, 1);
  PutOptions put;
  put.label = "small";
  ExpectDenseRoundTrip(store, {{37, 21}, gemm::v1::DATA_TYPE_FLOAT32, small}, put);
  // 4.6 MB of FLOAT16 in a rank-3 tensor: two chunks.
  const std::string multi = Random(DataType::kFloat16, 3 * 700 * 1100, 2);
  put.label = "";
  ExpectDenseRoundTrip(store, {{3, 700, 1100}, gemm::v1::DATA_TYPE_FLOAT16, multi}, put);
  // 9 MB over one connection in 1 MiB chunks: many.
  const std::string many = Random(DataType::kFloat32, 1500 * 1500, 3);
  put.chunk_bytes = 1 << 20;
  ExpectDenseRoundTrip(store, {{1500, 1500}, gemm::v1::DATA_TYPE_FLOAT32, many}, put);
}

TEST_F(TensorStoreClientTest, QuantizedTensorsReadBackByteForByte) {
  TensorStoreClient store = Store();
  for (auto format : {gemm::v1::QUANT_FORMAT_INT8, gemm::v1::QUANT_FORMAT_NVFP4}) {
    SCOPED_TRACE(format);
    std::unique_ptr<Quantized> small = MakeQuantized(format, 8, 64, 4);
    ExpectQuantizedRoundTrip(store, small->ref, {});
    // INT8: 4.3 MB of data; NVFP4: 4 MiB of data and 512 KiB of scales: several chunks,
    // the scales after the data.
    std::unique_ptr<Quantized> large = format == gemm::v1::QUANT_FORMAT_INT8
                                           ? MakeQuantized(format, 2100, 2048, 5)
                                           : MakeQuantized(format, 4096, 2048, 5);
    ExpectQuantizedRoundTrip(store, large->ref, {});
  }
}

TEST_F(TensorStoreClientTest, ParallelPartsOverThreeConnectionsReadBackWhole) {
  TensorStoreClient store = Store();
  PutOptions put;
  put.connections = 3;
  put.label = "parts";
  // 1001 rows do not divide by 3: the parts are 333, 334 and 334 rows.
  const std::string dense = Random(DataType::kFloat32, 1001 * 1500, 6);
  ExpectDenseRoundTrip(store, {{1001, 1500}, gemm::v1::DATA_TYPE_FLOAT32, dense}, put);
  const std::string batched = Random(DataType::kFloat16, 5 * 7 * 64, 7);
  ExpectDenseRoundTrip(store, {{5, 7, 64}, gemm::v1::DATA_TYPE_FLOAT16, batched}, put);
  for (auto format : {gemm::v1::QUANT_FORMAT_INT8, gemm::v1::QUANT_FORMAT_NVFP4}) {
    SCOPED_TRACE(format);
    std::unique_ptr<Quantized> q = MakeQuantized(format, 2000, 1024, 8);
    ExpectQuantizedRoundTrip(store, q->ref, put);
  }
  // More connections than rows: capped at one part per row.
  put.connections = 16;
  const std::string two_rows = Random(DataType::kFloat32, 2 * 10, 9);
  ExpectDenseRoundTrip(store, {{2, 10}, gemm::v1::DATA_TYPE_FLOAT32, two_rows}, put);
}

TEST_F(TensorStoreClientTest, MatmulByHandleEqualsTheSameCallInline) {
  TensorStoreClient store = Store();
  GemmClient client(channel_);
  const int64_t m = 33, n = 17, k = 300;
  const std::string a = Random(DataType::kFloat32, m * k, 10);
  const std::string b = Random(DataType::kFloat32, k * n, 11);
  const std::string c = Random(DataType::kFloat32, m * n, 12);
  MatmulArgs inline_args;
  inline_args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT32, a};
  inline_args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, b};
  inline_args.c = TensorRef{{m, n}, gemm::v1::DATA_TYPE_FLOAT32, c};
  inline_args.beta = 0.5f;
  MatmulResult expected;
  ASSERT_TRUE(client.Matmul(inline_args, {}, &expected).ok());

  absl::StatusOr<std::string> a_handle = store.PutTensor(inline_args.a);
  absl::StatusOr<std::string> b_handle = store.PutTensor(inline_args.b);
  absl::StatusOr<std::string> c_handle = store.PutTensor(*inline_args.c);
  ASSERT_TRUE(a_handle.ok()) << a_handle.status();
  ASSERT_TRUE(b_handle.ok()) << b_handle.status();
  ASSERT_TRUE(c_handle.ok()) << c_handle.status();

  MatmulArgs by_b = inline_args;
  by_b.b = {};  // nothing inline: the handle alone says what B is
  by_b.b_ref = *b_handle;
  MatmulResult got;
  absl::Status s = client.Matmul(by_b, {}, &got);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(got.c() == expected.c());
  EXPECT_TRUE(got.info().c_ref().handle().empty());

  MatmulArgs all_refs;
  all_refs.a_ref = *a_handle;
  all_refs.b_ref = *b_handle;
  all_refs.c_ref = *c_handle;
  all_refs.beta = 0.5f;
  s = client.Matmul(all_refs, {}, &got);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(got.c() == expected.c());

  // C kept on the server: its handle and shape come back, its bytes through GetTensor.
  MatmulArgs keep = by_b;
  keep.keep_c = KeepResult{60, "kept"};
  MatmulResult kept;
  s = client.Matmul(keep, {}, &kept);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_FALSE(kept.info().c_ref().handle().empty());
  EXPECT_TRUE(kept.c().empty());
  EXPECT_EQ(kept.info().c().shape_size(), 2);
  EXPECT_EQ(kept.info().c().shape(0), m);
  EXPECT_EQ(kept.info().c().shape(1), n);
  absl::StatusOr<DownloadedTensor> c_kept = store.GetTensor(kept.info().c_ref().handle());
  ASSERT_TRUE(c_kept.ok()) << c_kept.status();
  EXPECT_EQ(c_kept->header.dtype(), gemm::v1::DATA_TYPE_FLOAT32);
  EXPECT_EQ(c_kept->header.label(), "kept");
  EXPECT_TRUE(c_kept->data == expected.c());

  for (const std::string* h : {&*a_handle, &*b_handle, &*c_handle}) {
    EXPECT_TRUE(store.DeleteTensor(*h).ok());
  }
  EXPECT_TRUE(store.DeleteTensor(kept.info().c_ref().handle()).ok());
}

// QuantizedMatmul with B by handle, then A and B both by handle (C kept, read back),
// equal to the same calls inline, for both formats.
void ExpectQuantizedMatmulByHandleEqualsInline(TensorStoreClient& store, GemmClient& client,
                                               int64_t m, int64_t n, int64_t k) {
  const std::string a = Random(DataType::kFloat32, m * k, 13);
  for (auto format : {gemm::v1::QUANT_FORMAT_INT8, gemm::v1::QUANT_FORMAT_NVFP4}) {
    SCOPED_TRACE(format);
    std::unique_ptr<Quantized> b = MakeQuantized(format, n, k, 14);
    std::unique_ptr<Quantized> qa = MakeQuantized(format, m, k, 15);
    QuantizedMatmulArgs inline_args;
    inline_args.a_dense = TensorRef{{m, k}, gemm::v1::DATA_TYPE_FLOAT32, a};
    inline_args.b = b->ref;
    MatmulResult expected;
    ASSERT_TRUE(client.QuantizedMatmul(inline_args, {}, &expected).ok());

    absl::StatusOr<std::string> b_handle = store.PutTensor(b->ref);
    ASSERT_TRUE(b_handle.ok()) << b_handle.status();
    QuantizedMatmulArgs by_b = inline_args;
    by_b.b = {};
    by_b.b_ref = *b_handle;
    MatmulResult got;
    absl::Status s = client.QuantizedMatmul(by_b, {}, &got);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(got.c() == expected.c());

    // A resident too, quantized (both operands by handle).
    QuantizedMatmulArgs quantized_a;
    quantized_a.a = qa->ref;
    quantized_a.b = b->ref;
    ASSERT_TRUE(client.QuantizedMatmul(quantized_a, {}, &expected).ok());
    absl::StatusOr<std::string> a_handle = store.PutTensor(qa->ref);
    ASSERT_TRUE(a_handle.ok()) << a_handle.status();
    QuantizedMatmulArgs both;
    both.a_ref = *a_handle;
    both.b_ref = *b_handle;
    both.keep_c = KeepResult{};
    s = client.QuantizedMatmul(both, {}, &got);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_FALSE(got.info().c_ref().handle().empty());
    absl::StatusOr<DownloadedTensor> c = store.GetTensor(got.info().c_ref().handle());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->data == expected.c());
    for (const std::string& h : {*a_handle, *b_handle, got.info().c_ref().handle()}) {
      EXPECT_TRUE(store.DeleteTensor(h).ok());
    }
  }
}

TEST_F(TensorStoreClientTest, QuantizedMatmulByHandleEqualsTheSameCallInline) {
  TensorStoreClient store = Store();
  GemmClient client(channel_);
  ExpectQuantizedMatmulByHandleEqualsInline(store, client, 5, 24, 128);
}

// --quantized_layout=swap-ab on the CPU backend: every quantized tensor whose shape has the
// swap-AB layout is re-laid out in place at the end of its upload (as a GPU does for its
// kernels), yet GetTensor returns the uploaded bytes exactly (whole, in chunks, in parts,
// and a range of rows), and QuantizedMatmul by handle equals the same call inline.
class TensorStoreSwapAbTest : public TensorStoreClientTest {
 protected:
  void SetUp() override {
    ServerConfig config = TestConfig();
    config.quantized_layout = "swap-ab";
    Start(config);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
  }
  double Relayouts() {
    return MetricValue(server_->metrics(), "gemm_tensor_relayout_duration_seconds", {});
  }
};

TEST_F(TensorStoreSwapAbTest, ReLaidOutTensorsReadBackByteForByte) {
  TensorStoreClient store = Store();
  PutOptions parts;
  parts.connections = 3;
  for (auto format : {gemm::v1::QUANT_FORMAT_INT8, gemm::v1::QUANT_FORMAT_NVFP4}) {
    SCOPED_TRACE(format);
    const double before = Relayouts();
    // Several bands and chunks (the last band short), the scales after the data.
    std::unique_ptr<Quantized> large = MakeQuantized(format, 2128, 2048, 21);
    ExpectQuantizedRoundTrip(store, large->ref, {});
    EXPECT_EQ(Relayouts(), before + 1);
    // Three parts: relaid once, after the last.
    std::unique_ptr<Quantized> in_parts = MakeQuantized(format, 2000, 1024, 22);
    ExpectQuantizedRoundTrip(store, in_parts->ref, parts);
    EXPECT_EQ(Relayouts(), before + 2);
    // A shape without the layout stays as uploaded.
    std::unique_ptr<Quantized> odd = MakeQuantized(format, 24, 64, 23);
    ExpectQuantizedRoundTrip(store, odd->ref, {});
    EXPECT_EQ(Relayouts(), before + 2);

    // Over three connections: three row ranges (703, 703 and 704 rows), each across
    // bands, unpacked band by band.
    absl::StatusOr<std::string> handle = store.PutTensor(large->ref);
    ASSERT_TRUE(handle.ok()) << handle.status();
    absl::StatusOr<DownloadedTensor> ranges = store.GetTensor(*handle, absl::Seconds(60), 3);
    ASSERT_TRUE(ranges.ok()) << ranges.status();
    EXPECT_TRUE(ranges->data == large->ref.data) << "the data read back in ranges differs";
    EXPECT_TRUE(ranges->scales == large->ref.scales) << "the scales read back in ranges differ";
    EXPECT_TRUE(store.DeleteTensor(*handle).ok());
  }
}

// Shapes with the layout: both operands are re-laid out (two relayouts a format).
TEST_F(TensorStoreSwapAbTest, QuantizedMatmulOnReLaidOutTensorsEqualsInline) {
  TensorStoreClient store = Store();
  GemmClient client(channel_);
  const double before = Relayouts();
  ExpectQuantizedMatmulByHandleEqualsInline(store, client, 16, 48, 128);
  EXPECT_EQ(Relayouts(), before + 4);
}

TEST_F(TensorStoreClientTest, ADeletedTensorIsNotFound) {
  TensorStoreClient store = Store();
  GemmClient client(channel_);
  const std::string a = Random(DataType::kFloat32, 4 * 8, 16);
  const std::string b = Random(DataType::kFloat32, 8 * 3, 17);
  absl::StatusOr<std::string> handle =
      store.PutTensor(TensorRef{{8, 3}, gemm::v1::DATA_TYPE_FLOAT32, b});
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(store.DeleteTensor(*handle).ok());

  MatmulArgs args;
  args.a = {{4, 8}, gemm::v1::DATA_TYPE_FLOAT32, a};
  args.b_ref = *handle;
  MatmulResult result;
  EXPECT_EQ(client.Matmul(args, {}, &result).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.GetTensor(*handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.DeleteTensor(*handle).code(), absl::StatusCode::kNotFound);
  absl::StatusOr<gemm::v1::ListTensorsResponse> list = store.ListTensors();
  ASSERT_TRUE(list.ok()) << list.status();
  for (const gemm::v1::TensorInfo& t : list->tensors()) EXPECT_NE(t.handle().handle(), *handle);
}

TEST_F(TensorStoreClientTest, ListTensorsDescribesEachTensorAndTheStore) {
  TensorStoreClient store = Store();
  const std::string b = Random(DataType::kFloat16, 64 * 32, 18);
  PutOptions put;
  put.label = "weights";
  put.ttl_s = 3600;
  absl::StatusOr<std::string> dense =
      store.PutTensor(TensorRef{{64, 32}, gemm::v1::DATA_TYPE_FLOAT16, b}, put);
  ASSERT_TRUE(dense.ok()) << dense.status();
  std::unique_ptr<Quantized> q = MakeQuantized(gemm::v1::QUANT_FORMAT_NVFP4, 16, 64, 19);
  absl::StatusOr<std::string> quantized = store.PutTensor(q->ref);
  ASSERT_TRUE(quantized.ok()) << quantized.status();

  absl::StatusOr<gemm::v1::ListTensorsResponse> list = store.ListTensors();
  ASSERT_TRUE(list.ok()) << list.status();
  const gemm::v1::TensorInfo* d = nullptr;
  const gemm::v1::TensorInfo* qi = nullptr;
  for (const gemm::v1::TensorInfo& t : list->tensors()) {
    if (t.handle().handle() == *dense) d = &t;
    if (t.handle().handle() == *quantized) qi = &t;
  }
  ASSERT_NE(d, nullptr);
  ASSERT_NE(qi, nullptr);
  EXPECT_EQ(std::vector<int64_t>(d->shape().begin(), d->shape().end()),
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(d->dtype(), gemm::v1::DATA_TYPE_FLOAT16);
  EXPECT_EQ(d->label(), "weights");
  EXPECT_GE(d->bytes(), 64 * 32 * 2);
  EXPECT_TRUE(d->complete());
  EXPECT_GT(d->created_unix_ms(), 0);
  EXPECT_GE(d->expires_unix_ms(), d->created_unix_ms() + 3599 * 1000);
  EXPECT_FALSE(d->device().empty());
  EXPECT_EQ(qi->format(), gemm::v1::QUANT_FORMAT_NVFP4);
  EXPECT_EQ(qi->tensor_scale(), q->ref.tensor_scale);
  EXPECT_EQ(qi->expires_unix_ms(), 0);
  EXPECT_GE(qi->bytes(), 16 * 64 / 2 + 16 * 64 / 16);
  EXPECT_GE(list->store_bytes(), d->bytes() + qi->bytes());
  EXPECT_GE(list->store_cap_bytes(), list->store_bytes());
  EXPECT_TRUE(store.DeleteTensor(*dense).ok());
  EXPECT_TRUE(store.DeleteTensor(*quantized).ok());
}

// The server's refusal mid-upload comes back with its code, whole or in parts, and
// leaves nothing stored.
TEST_F(TensorStoreClientTest, AnUploadTheServerRefusesReturnsItsStatusAndStoresNothing) {
  TensorStoreClient store = Store();
  std::unique_ptr<Quantized> q = MakeQuantized(gemm::v1::QUANT_FORMAT_NVFP4, 3000, 1024, 21);
  std::string scales(q->ref.scales);
  scales[scales.size() - 5] = '\x7f';  // a NaN E4M3 scale, in the last part's rows
  QuantizedTensorRef bad = q->ref;
  bad.scales = scales;
  for (int connections : {1, 3}) {
    SCOPED_TRACE(connections);
    PutOptions put;
    put.connections = connections;
    const absl::StatusOr<std::string> handle = store.PutTensor(bad, put);
    EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument) << handle.status();
    absl::StatusOr<gemm::v1::ListTensorsResponse> list = store.ListTensors();
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_EQ(list->tensors_size(), 0);
  }
  // The same tensor with good scales goes up over the same connections afterwards.
  PutOptions put;
  put.connections = 3;
  ExpectQuantizedRoundTrip(store, q->ref, put);
}

// Checked here, before any call: bytes that do not match the shape.
TEST_F(TensorStoreClientTest, ATensorWhoseBytesDoNotMatchItsShapeIsRefusedHere) {
  TensorStoreClient store = Store();
  const std::string b = Random(DataType::kFloat32, 10, 20);
  absl::StatusOr<std::string> handle =
      store.PutTensor(TensorRef{{3, 4}, gemm::v1::DATA_TYPE_FLOAT32, b});
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(handle.status().message(),
            "the tensor has 40 data bytes and 0 scales bytes; its shape needs 48 and 0");
  QuantizedTensorRef q{{4, 24}, gemm::v1::QUANT_FORMAT_NVFP4, "", "", 1.0f};
  EXPECT_EQ(store.PutTensor(q).status().message(),
            "tensor shape [4,24]: NVFP4 needs K % 16 == 0");
}

TEST(TensorChunksTest, PartsCoverTheRowsInOrder) {
  for (int64_t rows : {3, 7, 1001, 4096}) {
    for (int parts : {2, 3, 4}) {
      int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const RowRange r = PartRows(rows, i, parts);
        EXPECT_EQ(r.begin, next);
        EXPECT_GE(r.end - r.begin, rows / parts);
        next = r.end;
      }
      EXPECT_EQ(next, rows);
    }
  }
  EXPECT_EQ(PartRows(1001, 1, 3).begin, 333);
  EXPECT_EQ(PartRows(1001, 1, 3).end, 667);
}

TEST(TensorChunksTest, RowsFollowTheDtypeOrFormat) {
  gemm::v1::TensorHeader h;
  h.add_shape(5);
  h.add_shape(7);
  h.add_shape(64);
  h.set_dtype(gemm::v1::DATA_TYPE_FLOAT16);
  TensorRows r = *RowsOf(h);
  EXPECT_EQ(r.rows, 35);
  EXPECT_EQ(r.data_row_bytes, 128);
  EXPECT_EQ(r.scales_row_bytes, 0);
  h.Clear();
  h.add_shape(10);
  h.add_shape(64);
  h.set_format(gemm::v1::QUANT_FORMAT_INT8);
  r = *RowsOf(h);
  EXPECT_EQ(r.data_row_bytes, 64);
  EXPECT_EQ(r.scales_row_bytes, 4);
  h.set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  r = *RowsOf(h);
  EXPECT_EQ(r.data_row_bytes, 32);
  EXPECT_EQ(r.scales_row_bytes, 4);
  h.set_format(gemm::v1::QUANT_FORMAT_UNSPECIFIED);
  EXPECT_EQ(RowsOf(h).status().code(), absl::StatusCode::kInvalidArgument);  // no dtype
}

TEST(TensorChunksTest, ChunksAreTensorChunkMessagesBothWays) {
  gemm::v1::TensorHeader header;
  header.add_shape(2);
  header.add_shape(32);
  header.set_format(gemm::v1::QUANT_FORMAT_NVFP4);
  header.set_label("w");
  const std::string data(32, 'd'), scales(4, 's');
  const std::string bytes = EncodeTensorChunk(&header, data, scales).Flatten();
  gemm::v1::TensorChunk parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.header().label(), "w");
  EXPECT_EQ(parsed.data(), data);
  EXPECT_EQ(parsed.scales(), scales);
  gemm::v1::TensorChunk data_chunk;
  ASSERT_TRUE(data_chunk.ParseFromString(EncodeTensorChunk(nullptr, data, "").Flatten()));
  EXPECT_FALSE(data_chunk.has_header());
  EXPECT_EQ(data_chunk.data(), data);

  // What protobuf writes, read back around the payloads.
  TensorChunkWire wire;
  const std::string serialized = parsed.SerializeAsString();
  ASSERT_TRUE(ParseTensorChunk(wire::ByteRuns(serialized), &wire).ok());
  ASSERT_TRUE(wire.header.has_value());
  EXPECT_EQ(wire.header->label(), "w");
  std::string got(wire.data.size(), '\0');
  wire.data.CopyTo(got.data());
  EXPECT_EQ(got, data);
  EXPECT_EQ(wire.scales.size(), 4u);
  TensorChunkWire data_only;
  gemm::v1::TensorChunk no_header;
  no_header.set_data("xyz");
  ASSERT_TRUE(ParseTensorChunk(wire::ByteRuns(no_header.SerializeAsString()), &data_only).ok());
  EXPECT_FALSE(data_only.header.has_value());
  EXPECT_EQ(data_only.data.size(), 3u);
  EXPECT_EQ(ParseTensorChunk(wire::ByteRuns(serialized + serialized), &wire).code(),
            absl::StatusCode::kInvalidArgument);  // a field twice
}

}  // namespace
}  // namespace gemmd::testing
