#include "kernels/npy_io.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gemmd {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// Bytes read for the header (numpy writes headers of a few hundred bytes).
constexpr uint64_t kMaxHeaderRead = 64 << 10;

// The value that follows 'key': in the header dict, up to (but not including) `end`.
absl::StatusOr<absl::string_view> DictValue(absl::string_view header, absl::string_view key,
                                            const std::string& name) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t pos = header.find(quoted);
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": .npy header has no ", quoted));
  }
  pos = header.find(':', pos + quoted.size());
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": malformed .npy header"));
  }
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(header.substr(pos + 1));
  size_t end;
  if (!rest.empty() && rest[0] == '(') {
    end = rest.find(')');
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": malformed shape in .npy header"));
    }
    ++end;
  } else {
    end = rest.find_first_of(",}");
    if (end == absl::string_view::npos) end = rest.size();
  }
  return absl::StripAsciiWhitespace(rest.substr(0, end));
}

}  // namespace

namespace {

// A .npy file's header from its first bytes (`bytes`, at least the whole header) and the
// file's size: the array's shape and type, data left empty; *data_start is where the
// data begins. INVALID_ARGUMENT as ParseNpy.
absl::StatusOr<NpyArray> ParseNpyHeader(absl::string_view bytes, uint64_t file_size,
                                        const std::string& name, size_t* data_start_out) {
  if (bytes.size() < kMagicSize + 4 || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a .npy file (bad magic)"));
  }
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_len;
  size_t header_start;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::InvalidArgumentError(absl::StrCat(name, ": truncated"));
    header_len = 0;
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    }
    header_start = 12;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": .npy format version ", major, " is not supported"));
  }
  if (bytes.size() < header_start + header_len) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": truncated .npy header"));
  }
  const absl::string_view header(bytes.data() + header_start, header_len);
  if (file_size < header_start + header_len) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": truncated .npy header"));
  }

  absl::StatusOr<absl::string_view> descr = DictValue(header, "descr", name);
  if (!descr.ok()) return descr.status();
  NpyArray array;
  if (*descr == "'<f4'") {
    array.type = DataType::kFloat32;
  } else if (*descr == "'<f2'") {
    array.type = DataType::kFloat16;
  } else if (*descr == "'<f8'") {
    array.type = DataType::kFloat64;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": dtype ", *descr,
        " is not supported; expected '<f4' (float32), '<f2' (float16) or '<f8' (float64)"));
  }
  absl::StatusOr<absl::string_view> fortran = DictValue(header, "fortran_order", name);
  if (!fortran.ok()) return fortran.status();
  if (*fortran != "False") {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": Fortran-order arrays are not supported; save with C order"));
  }
  absl::StatusOr<absl::string_view> shape = DictValue(header, "shape", name);
  if (!shape.ok()) return shape.status();
  absl::string_view dims = *shape;
  if (dims.size() < 2 || dims.front() != '(' || dims.back() != ')') {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": shape ", dims, " in the .npy header is not a tuple"));
  }
  dims.remove_prefix(1);  // '('
  dims.remove_suffix(1);  // ')'
  int64_t elements = 1;
  for (absl::string_view part : absl::StrSplit(dims, ',', absl::SkipWhitespace())) {
    int64_t dim;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &dim) || dim < 0 ||
        __builtin_mul_overflow(elements, dim, &elements)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": bad shape ", *shape));
    }
    array.shape.push_back(dim);
  }
  const size_t data_start = header_start + header_len;
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements),
                             static_cast<uint64_t>(DataTypeSize(array.type)), &expected) ||
      file_size - data_start != expected) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": has ", file_size - data_start,
                                                   " data bytes; shape ", *shape, " needs ",
                                                   expected));
  }
  *data_start_out = data_start;
  return array;
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& name) {
  size_t data_start = 0;
  absl::StatusOr<NpyArray> array = ParseNpyHeader(bytes, bytes.size(), name, &data_start);
  if (array.ok()) array->data = bytes.substr(data_start);
  return array;
}

std::string SerializeNpy(const NpyArray& array) {
  std::string shape = absl::StrJoin(array.shape, ", ");
  if (array.shape.size() == 1) shape += ",";
  const char* descr = array.type == DataType::kFloat16   ? "<f2"
                      : array.type == DataType::kFloat64 ? "<f8"
                                                         : "<f4";
  std::string header =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad with spaces so the data starts 64-byte aligned, ending in a newline (as numpy).
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, kMagicSize);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  out += header;
  out += array.data;
  return out;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  // The header first, then the data read straight into the array (one pass over a file
  // that may be gigabytes).
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fileno(file.get()), &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string head(static_cast<size_t>(std::min<uint64_t>(size, kMaxHeaderRead)), '\0');
  if (std::fread(head.data(), 1, head.size(), file.get()) != head.size()) {
    return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  size_t data_start = 0;
  absl::StatusOr<NpyArray> array = ParseNpyHeader(head, size, path, &data_start);
  if (!array.ok()) return array.status();
  array->data.resize(static_cast<size_t>(size - data_start));
  const size_t in_head = head.size() - std::min(head.size(), data_start);
  std::memcpy(array->data.data(), head.data() + data_start, in_head);
  const size_t rest = array->data.size() - in_head;
  if (std::fread(array->data.data() + in_head, 1, rest, file.get()) != rest) {
    return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  return array;
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string bytes = SerializeNpy(array);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace gemmd
