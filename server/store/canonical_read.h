// Reading a resident tensor's bytes as uploaded, whatever layout it is kept in: GetTensor
// returns the canonical format exactly, also for a quantized weight the store re-laid out
// for its kernels (kernels/quant_prepack.h). Thread-safe.
#ifndef GEMMD_SERVER_STORE_CANONICAL_READ_H_
#define GEMMD_SERVER_STORE_CANONICAL_READ_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// Bytes [offset, offset + bytes) of the tensor's canonical data (scales: false) or scales
// (true) into `out` (host memory). A swap-AB tensor is read a band of 256 rows at a time
// (each band is unpacked whole on the host, in a band-sized buffer, and the overlap
// copied). The device's read errors as they are.
absl::Status ReadCanonical(const StoredTensor& tensor, bool scales, int64_t offset, int64_t bytes,
                           char* out);

}  // namespace gemmd

#endif  // GEMMD_SERVER_STORE_CANONICAL_READ_H_
