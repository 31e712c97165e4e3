// libFuzzer target: the PutTensor chunk sequence (server/rpc/tensor_chunk_sequence.h)
// into a real TensorStore on a host-memory device: three streams at once (two tenants),
// whose chunks, completions, abandonments and deletes interleave as the input says,
// including part uploads into tensors the input opened. Beyond "no crash":
//   - a tensor that completes holds exactly the data bytes its chunks carried, and its
//     own tenant finds it while the other does not;
//   - a chunk may name its bytes in a shared-memory region of its tenant's (data_shm,
//     scales_shm; each tenant has one, "r", of 1 MiB): those count as its data;
//   - a stream's error ends the sequence with a message;
//   - when every stream is gone and every tensor deleted, the store's bytes are back to
//     zero (nothing an unfinished or failed upload took stays counted).
//
// Input: records. A record's first byte: stream = (byte >> 4) % 3, action = byte & 15.
//   0-10  a chunk: 2 bytes of length (little-endian, cut to what is left), then the
//         chunk's serialized bytes
//   11    the same chunk, split into 1-7 byte runs (the second byte says how)
//   12    the stream ends: Complete(), and a fresh stream takes its place
//   13    the stream goes away unfinished (a disconnect)
//   14    a part's header chunk: next byte picks an opened tensor and the part number
//   15    Delete: next byte picks a tensor this input stored
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/stubs/common.h"
#include "proto/wire/gemm_wire.h"
#include "server/devices/device.h"
#include "server/observability/log.h"
#include "server/regions/region_table.h"
#include "server/rpc/tensor_chunk_sequence.h"
#include "server/store/tensor_store.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Resident memory in host memory (Device's own), nothing else.
class HostDevice : public gemmd::Device {
 public:
  HostDevice() {
    description_.kind = "host";
    description_.name = "host:0";
  }
  const gemmd::DeviceDescription& description() const override { return description_; }
  absl::Status Run(const gemmd::DeviceLaunch&, int, gemmd::LaunchTimes*) override {
    return absl::UnimplementedError("no kernels here");
  }
  bool healthy() const override { return true; }

 private:
  gemmd::DeviceDescription description_;
};

constexpr int kStreams = 3;
constexpr int64_t kCapBytes = int64_t{64} << 20;

const char* TenantOf(int stream) { return stream == 2 ? "b" : "a"; }

gemmd::TensorStore& Store() {
  static HostDevice* device = new HostDevice();
  static gemmd::TensorStore* store = [] {
    gemmd::TensorStoreOptions options;
    options.cap_bytes = kCapBytes;
    return new gemmd::TensorStore(options, {device}, /*metrics=*/nullptr);
  }();
  return *store;
}

constexpr int64_t kRegionBytes = 1 << 20;

// Region "r" for each tenant: an object of patterned bytes, unlinked once mapped (the
// mapping keeps it).
gemmd::RegionTable& Regions() {
  static gemmd::RegionTable* table = [] {
    gemmd::RegionSettings settings;
    settings.prefix = "gemmdfuzz-";
    auto* regions = new gemmd::RegionTable(settings);
    for (const char* tenant : {"a", "b"}) {
      const std::string key = "/gemmdfuzz-" + std::string(tenant) + "@" + std::to_string(getpid());
      const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
      Check(fd >= 0 && ftruncate(fd, kRegionBytes) == 0);
      std::string pattern(kRegionBytes, '\0');
      for (int64_t i = 0; i < kRegionBytes; ++i) pattern[i] = static_cast<char>(i * 7 + tenant[0]);
      Check(pwrite(fd, pattern.data(), pattern.size(), 0) == kRegionBytes);
      close(fd);
      Check(regions->Register(tenant, "r", key, 0, 0).ok());
      shm_unlink(key.c_str());
    }
    return regions;
  }();
  return *table;
}

struct Stream {
  std::unique_ptr<gemmd::TensorChunkSequence> sequence;
  std::string data;  // every data byte its accepted chunks carried, in order
  bool part = false;  // uploads a part of an opened tensor
  bool failed = false;
};

class Session {
 public:
  Session() {
    for (int s = 0; s < kStreams; ++s) Reset(s);
  }
  ~Session() {
    for (Stream& stream : streams_) stream.sequence.reset();
    gemmd::TensorStore& store = Store();
    for (const char* tenant : {"a", "b"}) {
      for (const gemmd::TensorListing& t : store.List(tenant)) {
        Check(store.Delete(t.handle, tenant).ok());
      }
    }
    store.ReleaseSpares();  // the memory of temporaries, kept for the next ones
    Check(store.used_bytes() == 0);
  }

  void Chunk(int s, const gemmd::wire::ByteRuns& bytes) {
    Stream& stream = streams_[s];
    if (stream.failed) return;
    const absl::Status status = stream.sequence->Consume(bytes);
    if (!status.ok()) {
      Check(!status.message().empty());
      stream.failed = true;
      stream.sequence->Abandon();
      return;
    }
    gemmd::wire::TensorChunkWire chunk;
    Check(gemmd::wire::ParseTensorChunk(bytes, &chunk).ok());
    const size_t at = stream.data.size();
    if (chunk.has_data_shm) {  // accepted: the slice is inside the tenant's region
      absl::StatusOr<std::shared_ptr<gemmd::SharedRegion>> region =
          Regions().Find(TenantOf(s), chunk.data_shm.region());
      Check(region.ok() && chunk.data.empty());
      stream.data.append((*region)->data() + chunk.data_shm.offset(),
                         static_cast<size_t>(chunk.data_shm.bytes()));
      return;
    }
    stream.data.resize(at + chunk.data.size());
    chunk.data.CopyTo(stream.data.data() + at);
  }

  void Complete(int s) {
    Stream& stream = streams_[s];
    if (!stream.failed) {
      absl::StatusOr<std::string> handle = stream.sequence->Complete();
      if (handle.ok()) Completed(s, *handle);
    }
    Reset(s);
  }

  void Abandon(int s) { Reset(s); }

  // A part's header for a tensor this input opened (or, with none, a made-up handle).
  void PartHeader(int s, uint8_t pick) {
    gemm::v1::TensorChunk chunk;
    gemm::v1::TensorHeader* header = chunk.mutable_header();
    header->mutable_part_of()->set_handle(
        opened_.empty() ? "t1-0000000000000000-00000000000000000000000000000000"
                        : opened_[pick % opened_.size()]);
    header->set_part(pick >> 4);
    const std::string bytes = chunk.SerializeAsString();
    gemmd::wire::ByteRuns runs;
    runs.Append(bytes);
    streams_[s].part = true;
    Chunk(s, runs);
  }

  void Delete(uint8_t pick) {
    if (stored_.empty()) return;
    const auto& [handle, tenant] = stored_[pick % stored_.size()];
    const absl::Status deleted = Store().Delete(handle, tenant);
    Check(deleted.ok() || deleted.code() == absl::StatusCode::kNotFound);
  }

 private:
  void Reset(int s) {
    streams_[s].sequence =
        std::make_unique<gemmd::TensorChunkSequence>(&Store(), TenantOf(s), &Regions());
    streams_[s].data.clear();
    streams_[s].part = false;
    streams_[s].failed = false;
  }

  void Completed(int s, const std::string& handle) {
    gemmd::TensorStore& store = Store();
    const char* tenant = TenantOf(s);
    stored_.emplace_back(handle, tenant);
    const char* other = s == 2 ? "a" : "b";
    Check(store.Acquire(handle, other).status().code() == absl::StatusCode::kNotFound);
    if (streams_[s].sequence->opened_parts()) {
      opened_.push_back(handle);
      return;
    }
    absl::StatusOr<gemmd::TensorPin> pin = store.Acquire(handle, tenant);
    if (streams_[s].part) {
      // Usable once every part is in; a failed part took the tensor out.
      Check(pin.ok() || pin.status().code() == absl::StatusCode::kFailedPrecondition ||
            pin.status().code() == absl::StatusCode::kNotFound);
      return;
    }
    Check(pin.ok());
    const std::string& data = streams_[s].data;
    Check(static_cast<int64_t>(data.size()) == gemmd::DataBytes((*pin)->spec));
    Check(std::memcmp((*pin)->data(), data.data(), data.size()) == 0);
  }

  Stream streams_[kStreams];
  std::vector<std::string> opened_;
  std::vector<std::pair<std::string, std::string>> stored_;  // handle, tenant
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  gemmd::SetLogEnabled(false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Session session;
  size_t at = 0;
  while (at < size) {
    const uint8_t op = data[at++];
    const int s = (op >> 4) % kStreams;
    const int action = op & 15;
    if (action <= 11) {
      size_t split = 0;
      if (action == 11) {
        if (at >= size) break;
        split = data[at++] % 7 + 1;
      }
      if (at + 2 > size) break;
      const size_t length = std::min<size_t>(data[at] | data[at + 1] << 8, size - at - 2);
      at += 2;
      const std::string bytes(reinterpret_cast<const char*>(data) + at, length);
      at += length;
      std::vector<std::string> pieces;
      const size_t piece = split == 0 ? std::max<size_t>(bytes.size(), 1) : split;
      for (size_t p = 0; p < bytes.size(); p += piece) pieces.push_back(bytes.substr(p, piece));
      gemmd::wire::ByteRuns runs;
      for (const std::string& p : pieces) runs.Append(p);
      session.Chunk(s, runs);
    } else if (action == 12) {
      session.Complete(s);
    } else if (action == 13) {
      session.Abandon(s);
    } else if (at < size) {
      const uint8_t pick = data[at++];
      if (action == 14) {
        session.PartHeader(s, pick);
      } else {
        session.Delete(pick);
      }
    }
  }
  return 0;
}
