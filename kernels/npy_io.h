// Reading and writing NumPy .npy files (format versions 1.0-3.0) for FLOAT32 ('<f4'),
// FLOAT16 ('<f2') and FLOAT64 ('<f8') arrays in C order, as the client's --a/--b/--out use
// them.
// Errors: NOT_FOUND / INTERNAL for I/O, INVALID_ARGUMENT for files it cannot take
// (other dtypes, Fortran order, truncated data), each message naming the file.
#ifndef GEMMD_KERNELS_NPY_IO_H_
#define GEMMD_KERNELS_NPY_IO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

struct NpyArray {
  std::vector<int64_t> shape;
  DataType type = DataType::kFloat32;
  std::string data;  // raw little-endian elements, C order
};

absl::StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& name);
std::string SerializeNpy(const NpyArray& array);

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);

}  // namespace gemmd

#endif  // GEMMD_KERNELS_NPY_IO_H_
