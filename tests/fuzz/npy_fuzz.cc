// libFuzzer target: the .npy reader (kernels/npy_io.h) that gemm-cli's --a/--b/--c and
// `put` run on files a user hands it. Beyond "no crash": an accepted array's bytes are
// exactly its shape's element count times the element size, and it survives a round trip
// through SerializeNpy unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/npy_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gemmd::NpyArray> array = gemmd::ParseNpy(bytes, "fuzz.npy");
  if (!array.ok()) return 0;
  int64_t elements = 1;
  for (int64_t d : array->shape) {
    if (d < 0) std::abort();
    elements *= d;
  }
  const int64_t item = static_cast<int64_t>(gemmd::DataTypeSize(array->type));
  if (static_cast<int64_t>(array->data.size()) != elements * item) std::abort();
  absl::StatusOr<gemmd::NpyArray> again =
      gemmd::ParseNpy(gemmd::SerializeNpy(*array), "again.npy");
  if (!again.ok() || again->shape != array->shape || again->type != array->type ||
      again->data != array->data) {
    std::abort();
  }
  return 0;
}
