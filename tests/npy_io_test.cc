#include "kernels/npy_io.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kernels/half.h"

namespace gemmd {
namespace {

// What numpy 1.x writes for np.arange(6, dtype='<f4').reshape(2, 3) (version 1.0 header,
// padded to 64 bytes with spaces and a newline).
std::string NumpyWritten2x3() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(header.size()));
  bytes.push_back('\0');
  bytes += header;
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&f), 4);
  }
  return bytes;
}

TEST(NpyTest, ParsesWhatNumpyWrites) {
  absl::StatusOr<NpyArray> a = ParseNpy(NumpyWritten2x3(), "x.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->type, DataType::kFloat32);
  ASSERT_EQ(a->data.size(), 24u);
  EXPECT_EQ(reinterpret_cast<const float*>(a->data.data())[5], 5.0f);
}

TEST(NpyTest, SerializeMatchesNumpyLayout) {
  NpyArray a;
  a.shape = {2, 3};
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    a.data.append(reinterpret_cast<const char*>(&f), 4);
  }
  const std::string bytes = SerializeNpy(a);
  EXPECT_EQ(bytes, NumpyWritten2x3());
  EXPECT_EQ((bytes.size() - a.data.size()) % 64, 0u);
}

TEST(NpyTest, RoundTripsShapesAndTypes) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{7}, std::vector<int64_t>{3, 5}, std::vector<int64_t>{2, 3, 4},
        std::vector<int64_t>{0, 4}}) {
    for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kFloat64}) {
      NpyArray a;
      a.shape = shape;
      a.type = type;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      for (int64_t i = 0; i < n; ++i) {
        const float f = static_cast<float>(i) * 0.25f - 1.0f;
        if (type == DataType::kFloat32) {
          a.data.append(reinterpret_cast<const char*>(&f), 4);
        } else if (type == DataType::kFloat64) {
          const double d = static_cast<double>(f) + 1e-12;  // not a float's value
          a.data.append(reinterpret_cast<const char*>(&d), 8);
        } else {
          const uint16_t h = FloatToHalfBits(f);
          a.data.append(reinterpret_cast<const char*>(&h), 2);
        }
      }
      absl::StatusOr<NpyArray> b = ParseNpy(SerializeNpy(a), "mem");
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->shape, a.shape);
      EXPECT_EQ(b->type, a.type);
      EXPECT_EQ(b->data, a.data);
    }
  }
}

TEST(NpyTest, FileRoundTrip) {
  NpyArray a;
  a.shape = {1, 2};
  a.type = DataType::kFloat16;
  a.data = std::string("\x00\x3c\x00\xc0", 4);  // 1.0, -2.0
  const std::string path = ::testing::TempDir() + "/gemmd_npy_test.npy";
  ASSERT_TRUE(WriteNpyFile(path, a).ok());
  absl::StatusOr<NpyArray> b = ReadNpyFile(path);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data, a.data);
  std::remove(path.c_str());
  EXPECT_EQ(ReadNpyFile(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(NpyTest, RejectsWhatItCannotTake) {
  std::string good = NumpyWritten2x3();
  auto code_and_message = [](const std::string& bytes) {
    absl::StatusOr<NpyArray> a = ParseNpy(bytes, "f.npy");
    EXPECT_FALSE(a.ok());
    return std::make_pair(a.status().code(), std::string(a.status().message()));
  };
  std::string i8 = good;
  i8.replace(i8.find("<f4"), 3, "<i8");
  auto [code, message] = code_and_message(i8);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(message,
            "f.npy: dtype '<i8' is not supported; expected '<f4' (float32), '<f2' (float16) or "
            "'<f8' (float64)");
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_EQ(code_and_message(fortran).second,
            "f.npy: Fortran-order arrays are not supported; save with C order");
  EXPECT_EQ(code_and_message(good.substr(0, good.size() - 4)).second,
            "f.npy: has 20 data bytes; shape (2, 3) needs 24");
  EXPECT_EQ(code_and_message("hello world").second, "f.npy: not a .npy file (bad magic)");
}

// Found by tests/fuzz/npy_fuzz: a shape that is not a tuple ("'shape': ,2, 1, 2)") made
// the reader strip the parentheses of an empty value, past its end.
TEST(NpyTest, ShapeThatIsNotATupleIsRefused) {
  std::string good = NumpyWritten2x3();
  std::string no_paren = good;
  no_paren.replace(no_paren.find("(2, 3)"), 6, ",2, 3)");
  absl::StatusOr<NpyArray> a = ParseNpy(no_paren, "f.npy");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(), "f.npy: shape  in the .npy header is not a tuple");
  std::string bare = good;
  bare.replace(bare.find("(2, 3)"), 6, "2     ");
  EXPECT_EQ(ParseNpy(bare, "f.npy").status().message(),
            "f.npy: shape 2 in the .npy header is not a tuple");
  // A shape whose byte count overflows 64 bits.
  std::string huge = good;
  huge.replace(huge.find("(2, 3)"), 6, "(9223372036854775807,)");
  EXPECT_EQ(ParseNpy(huge, "f.npy").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmd
