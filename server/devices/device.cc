#include "server/devices/device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemmd {

std::string DeviceId(const DeviceDescription& description) {
  return absl::StrCat(description.kind, ":", description.index);
}

namespace {

struct OperandSizes {
  int64_t a = 0, b = 0, c_in = 0, c = 0;
};

OperandSizes SizesOf(const GemmProblem& p) {
  const auto bytes = [](int64_t elements, DataType type) {
    return elements * static_cast<int64_t>(DataTypeSize(type));
  };
  return {bytes(p.ElementsA(), p.a_type), bytes(p.ElementsB(), p.b_type),
          p.beta != 0.0f ? bytes(p.ElementsCIn(), p.c_type) : 0, bytes(p.ElementsC(), p.c_type)};
}

}  // namespace

int64_t OperandBytes(const GemmProblem& p) {
  const OperandSizes s = SizesOf(p);
  return s.a + s.b + s.c_in + s.c;
}

LaunchLayout LayoutOf(const std::vector<LaunchItem>& items) {
  LaunchLayout layout;
  for (const LaunchItem& item : items) {
    layout.a_offset.push_back(layout.a_bytes);
    layout.b_offset.push_back(layout.b_bytes);
    layout.c_in_offset.push_back(layout.c_in_bytes);
    layout.c_offset.push_back(layout.c_bytes);
    const OperandSizes s = SizesOf(item.problem);
    layout.a_bytes += s.a;
    layout.b_bytes += s.b;
    layout.c_in_bytes += s.c_in;
    layout.c_bytes += s.c;
  }
  return layout;
}

namespace {
constexpr int64_t kHugePageBytes = int64_t{2} << 20;
}  // namespace

absl::StatusOr<void*> Device::AllocateResident(int64_t bytes) {
  if (bytes <= 0 || bytes > (int64_t{1} << 50)) {
    return absl::InvalidArgumentError(absl::StrCat("resident allocation of ", bytes, " bytes"));
  }
  void* memory = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host memory for a ", bytes, "-byte resident tensor is not available"));
  }
  // Uploads write it front to back once: in 2 MiB pages that is one fault per 512 small
  // ones (where transparent huge pages are on "madvise"; a hint, so failure is fine).
  if (bytes >= kHugePageBytes) madvise(memory, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  return memory;
}

absl::Status Device::FreeResident(void* memory, int64_t bytes) {
  if (munmap(memory, static_cast<size_t>(bytes)) != 0) {
    const int error = errno;
    return absl::InternalError(absl::StrCat("munmap of a ", bytes,
                                            "-byte resident tensor: ", std::strerror(error),
                                            error == ENOMEM ? " (vm.max_map_count reached?)" : ""));
  }
  return absl::OkStatus();
}

int64_t Device::ResidentFootprint(int64_t bytes) const {
  static const int64_t kPage = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  return (std::max<int64_t>(bytes, 1) + kPage - 1) / kPage * kPage;
}

absl::Status Device::WriteResident(void* resident, const void* host, size_t bytes) {
  std::memcpy(resident, host, bytes);
  return absl::OkStatus();
}

absl::Status Device::WriteResidentRuns(void* resident,
                                       const std::vector<absl::string_view>& runs) {
  char* at = static_cast<char*>(resident);
  for (absl::string_view run : runs) {
    if (absl::Status s = WriteResident(at, run.data(), run.size()); !s.ok()) return s;
    at += run.size();
  }
  return absl::OkStatus();
}

absl::Status Device::RelayoutResident(QuantFormat format, int64_t rows, int64_t k, void* data,
                                      void* scales, WeightLayout layout) {
  if (layout == WeightLayout::kCanonical) return absl::OkStatus();
  return RelayoutSwapAbInPlace(format, rows, k, static_cast<uint8_t*>(data),
                               static_cast<uint8_t*>(scales));
}

absl::Status Device::ReadResident(void* host, const void* resident, size_t bytes) {
  std::memcpy(host, resident, bytes);
  return absl::OkStatus();
}

}  // namespace gemmd
