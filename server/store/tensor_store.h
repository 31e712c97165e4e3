// The tensor store: resident tensors of one server process, uploaded once (PutTensor)
// and used by handle in any number of GEMMs (docs/ARCHITECTURE.md, "Resident tensors").
//
// A tensor lives on one device, in that device's resident memory (Device::
// AllocateResident: device memory on a GPU, host memory on the CPU backend), packed as
// uploaded for a quantized one. What it really takes counts against one cap
// (--tensor_store_bytes) from the moment an upload is admitted until its memory is
// freed: its allocation's footprint on the device (Device::ResidentFootprint: whole
// pages of host memory) and the store's own record of it (kTensorRecordBytes), so a
// crowd of tiny tensors cannot take more memory than the cap says. Their number is
// capped too (max_tensors), and so are the uploads one tenant may have open at once
// (max_open_uploads). Every cap is checked before any memory is taken.
//
// Lifetime: a tensor is a shared StoredTensor. The store's map holds one reference; every
// job that uses it holds a TensorPin. Delete and TTL expiry take it out of the map (new
// lookups answer NOT_FOUND at once) and its memory is freed when the last pin goes, so a
// queued or running job never loses its operand. An upload that is not finished
// (disconnect, bad chunk) is never in the map and its memory goes with the Upload. Memory
// the device fails to free stays counted (and is logged): the cap never pretends. A
// temporary's memory is kept a moment for the next temporary of its size (spares, in
// tensor_store.cc's Accounts), counted in the store's bytes until it is freed.
//
// Handles: "t1-" + the instance (64 random bits) + "-" + 128 random bits, in hex; a
// handle of another instance is NOT_FOUND saying so.
//
// Placement: a tensor goes to the device its upload names, else to the device that
// already holds most of its tenant's tensors (so tensors a caller uses together are
// together), else to the healthy device with the fewest resident bytes.
//
// Parallel upload: OpenParts makes an incomplete tensor that parts upload into, each on
// its own stream (BeginPart); it becomes usable when every part has finished. A part
// that fails takes the whole tensor out; so does an open tensor with no part uploading
// for `part_upload_timeout` (since it was opened or a part last began or finished).
// Thread-safe.
#ifndef GEMMD_SERVER_STORE_TENSOR_STORE_H_
#define GEMMD_SERVER_STORE_TENSOR_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"
#include "kernels/quant_formats.h"
#include "kernels/quant_prepack.h"
#include "server/devices/device.h"
#include "server/observability/clock.h"
#include "server/observability/metrics.h"
#include "server/store/tensor_spec.h"

namespace gemmd {

struct StoredTensor {
  std::string handle;
  TensorSpec spec;
  int device_index = 0;
  Device* device = nullptr;
  // In the device's resident memory: data, then scales (quantized) at an aligned offset.
  void* memory = nullptr;
  int64_t bytes = 0;    // the allocation
  int64_t charged = 0;  // what the cap counts for it: the allocation's footprint, the record
  const char* data() const { return static_cast<const char*>(memory); }
  const char* scales() const { return data() + ScalesOffset(spec); }
  absl::Time created;
  absl::Time expires = absl::InfiniteFuture();
  std::string label;
  // The tenant that stored it ("" without authentication): only that tenant's calls find
  // it; to any other it does not exist (NOT_FOUND, as an unknown handle).
  std::string tenant;
  // Part of one call of several RPCs (TensorHeader.temporary): a draining server serves
  // the RPCs that continue it and waits for it to go.
  bool temporary = false;
  // A quantized tensor's layout in memory (kernels/quant_prepack.h): set once, when its
  // upload completes, before any job can use it.
  WeightLayout layout = WeightLayout::kCanonical;

  // UNAVAILABLE (naming the tensor and its device) once its device has faulted: a faulted
  // GPU's memory cannot be read, so the tensor is lost; OK otherwise.
  absl::Status CheckDeviceHealthy() const;
};
using TensorPin = std::shared_ptr<const StoredTensor>;

// What the store counts for each tensor's record (handle, spec, label, map entry) on top
// of its memory: measured at about 2 KB of heap per tensor on the CPU backend.
inline constexpr int64_t kTensorRecordBytes = 2048;

// Most parts one parallel upload may have.
inline constexpr uint32_t kMaxParts = 1024;

// Which layout a quantized tensor is kept in once uploaded (--quantized_layout): the
// device's preference (auto), always as uploaded (canonical), or swap-AB wherever the shape
// has it (swap-ab; on the CPU backend this exercises the relayout and the reads back).
enum class QuantizedLayoutPolicy { kAuto, kCanonical, kSwapAb };

struct TensorStoreOptions {
  int64_t cap_bytes = 0;  // 0: nothing can be stored
  // Most bytes one tenant's tensors may take (0: only the cap above). Applies to named
  // tenants, i.e. when the server authenticates callers.
  int64_t tenant_cap_bytes = 0;
  // Most tensors at once (uploads in progress and deleted tensors still pinned included).
  int64_t max_tensors = 16384;
  // Most uploads one tenant (everyone, without authentication) may have open at once:
  // begun (the room taken) and not complete. 0: no limit.
  int64_t max_open_uploads = 64;
  // How often expired tensors and abandoned part uploads are looked for.
  absl::Duration sweep_interval = absl::Seconds(1);
  // An open tensor with no part uploading for this long is dropped.
  absl::Duration part_upload_timeout = absl::Seconds(10);
  absl::Duration max_ttl = absl::Hours(24 * 365);
  QuantizedLayoutPolicy quantized_layout = QuantizedLayoutPolicy::kAuto;
};

// A listing entry.
struct TensorListing {
  std::string handle;
  TensorSpec spec;
  int64_t bytes = 0;  // what the store's cap counts for it
  std::string device;
  absl::Time created;
  absl::Time expires = absl::InfiniteFuture();
  std::string label;
  bool complete = true;
};

class TensorStore {
 public:
  // `devices` (where tensors may go) and `metrics` (may be null) outlive the store.
  TensorStore(TensorStoreOptions options, std::vector<Device*> devices, ServerMetrics* metrics,
              Clock* clock = Clock::Real());
  ~TensorStore();
  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  const std::string& instance() const { return instance_; }
  int64_t cap_bytes() const { return options_.cap_bytes; }
  int64_t max_tensors() const { return options_.max_tensors; }
  int64_t used_bytes() const;
  // Tensors that hold memory now (uploads in progress and pinned deleted ones included).
  int64_t tensor_count() const;
  // What the cap counts for a tensor of `bytes` on device `device_index`.
  int64_t ChargeFor(int64_t bytes, int device_index) const;

  // One stream's writes into a tensor: the whole tensor, or one part of it. Data and
  // scales each arrive in order; Finish checks that every byte came.
  class Upload {
   public:
    ~Upload();  // unfinished: the tensor (all of it, for a part) is dropped
    // INVALID_ARGUMENT for bytes beyond what the tensor (or part) holds, or scale bytes
    // that are not valid scales; INTERNAL when the device cannot take them.
    absl::Status Append(absl::string_view data, absl::string_view scales);
    // The same for data and scales in pieces (a received chunk's slices).
    absl::Status AppendRuns(const std::vector<absl::string_view>& data,
                            const std::vector<absl::string_view>& scales);
    // The handle, once every byte arrived (INVALID_ARGUMENT saying how many are missing).
    absl::StatusOr<std::string> Finish();
    int64_t bytes_written() const { return data_done_ + scales_done_; }
    const std::string& handle() const { return tensor_->handle; }

   private:
    friend class TensorStore;
    Upload() = default;
    TensorStore* store_ = nullptr;
    std::shared_ptr<StoredTensor> tensor_;
    std::shared_ptr<void> open_slot_;  // counts against max_open_uploads until finished
    int part_ = -1;                    // -1: the whole tensor
    int64_t data_begin_ = 0, data_bytes_ = 0, data_done_ = 0;
    int64_t scales_begin_ = 0, scales_bytes_ = 0, scales_done_ = 0;
    ScaleChecker checker_;
    bool finished_ = false;
  };

  // A new tensor, uploaded by one stream. INVALID_ARGUMENT for a bad spec, ttl or label;
  // RESOURCE_EXHAUSTED (bytes asked and free) when it does not fit the cap or the
  // device's memory, or when the store holds max_tensors or the tenant has
  // max_open_uploads open. `ttl` zero: no expiry. `device`: the name of the device to
  // keep it on, or empty for the store's choice (see Placement above); INVALID_ARGUMENT
  // for a name of no device, UNAVAILABLE for one that faulted.
  absl::StatusOr<std::unique_ptr<Upload>> Begin(const TensorSpec& spec, absl::Duration ttl,
                                                std::string label, std::string tenant = "",
                                                absl::string_view device = "",
                                                bool temporary = false);
  // A new tensor uploaded in `parts` parts (2 <= parts <= its rows): its handle. Errors
  // as Begin.
  absl::StatusOr<std::string> OpenParts(const TensorSpec& spec, absl::Duration ttl,
                                        std::string label, int parts, std::string tenant = "",
                                        absl::string_view device = "", bool temporary = false);
  // Part `part` of an open tensor: NOT_FOUND for an unknown handle, INVALID_ARGUMENT for
  // a part out of range, FAILED_PRECONDITION for one already started or a complete tensor.
  absl::StatusOr<std::unique_ptr<Upload>> BeginPart(absl::string_view handle, int part,
                                                    absl::string_view tenant = "");

  // A complete tensor for a job to use, pinned. NOT_FOUND (unknown, expired, deleted,
  // another instance's); FAILED_PRECONDITION while parts are still uploading.
  // `tenant`: the caller's; another tenant's tensor is NOT_FOUND here and in Delete and
  // BeginPart, and List shows the caller's own tensors only.
  absl::StatusOr<TensorPin> Acquire(absl::string_view handle, absl::string_view tenant = "");
  // The id of the device a tensor (complete or still uploading) is kept on ("cuda:1"),
  // or NOT_FOUND as Acquire.
  absl::StatusOr<std::string> DeviceOf(absl::string_view handle, absl::string_view tenant = "");
  // Takes a tensor out (complete or not); its memory goes when its last pin does.
  absl::Status Delete(absl::string_view handle, absl::string_view tenant = "");
  std::vector<TensorListing> List(absl::string_view tenant = "");
  // Whether `handle` names a temporary tensor of `tenant` (complete or still uploading)
  // that has not expired.
  bool IsTemporary(absl::string_view handle, absl::string_view tenant);
  // Temporary tensors in the store, all tenants, not expired.
  int64_t TemporaryCount();

  // Room for a result kept resident: a tensor of `spec` on `device_index` (-1: the
  // store's choice), taken from the cap. It joins the store by Commit once the job has
  // written it; dropped before, it leaves nothing behind.
  absl::StatusOr<std::shared_ptr<StoredTensor>> Allocate(const TensorSpec& spec,
                                                         int device_index, absl::Duration ttl,
                                                         std::string label,
                                                         std::string tenant = "",
                                                         bool temporary = false);
  absl::StatusOr<std::string> Commit(std::shared_ptr<StoredTensor> tensor);

  // Takes expired tensors and abandoned part uploads out now (the sweeper calls it).
  void Sweep();
  // Frees the memory kept of temporaries that went (spares, in tensor_store.cc) now,
  // rather than when the sweep finds it old.
  void ReleaseSpares();

  // Takes out every tensor of a tenant not in `tenants` (the tokens file no longer names
  // it, so nobody can reach them); returns how many. Tenant "" (no authentication) is
  // never dropped.
  int64_t DropTenantsOtherThan(const std::vector<std::string>& tenants);

 private:
  struct Entry {
    std::shared_ptr<StoredTensor> tensor;
    bool complete = true;
    std::vector<uint8_t> parts;  // per part: 0 waiting, 1 uploading, 2 done
    int parts_done = 0;
    int parts_uploading = 0;
    absl::Time last_part_activity;    // opened, or a part began or finished
    absl::Duration ttl;               // a part upload's TTL, counted once it is complete
    std::shared_ptr<void> open_slot;  // until complete (max_open_uploads)
  };
  struct Accounts;  // bytes per device, shared with the tensors' deleters

  absl::Status CheckTtl(absl::Duration ttl) const;
  absl::StatusOr<std::shared_ptr<StoredTensor>> Create(const TensorSpec& spec, int device_index,
                                                       absl::Duration ttl, std::string label,
                                                       std::string tenant, bool temporary);
  // A place among the tenant's open uploads (max_open_uploads), held until released.
  absl::StatusOr<std::shared_ptr<void>> OpenSlot(const std::string& tenant);
  // A new tensor for an upload (whole or in parts) and its open-upload slot: placed on
  // `device` (ResolveDevice), within the caps.
  struct Opened {
    std::shared_ptr<StoredTensor> tensor;
    std::shared_ptr<void> slot;
  };
  absl::StatusOr<Opened> OpenUpload(const TensorSpec& spec, absl::Duration ttl, std::string label,
                                    std::string tenant, absl::string_view device,
                                    bool temporary);
  // The entry of `handle` if it is `tenant`'s and has not expired; null otherwise (to the
  // caller it does not exist: NOT_FOUND).
  const Entry* FindLiveLocked(absl::string_view handle, absl::string_view tenant) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes an entry out of the map (its memory goes with its last pin).
  std::shared_ptr<StoredTensor> EraseLocked(absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewHandle() const;
  // NOT_FOUND naming the handle (and the instance that issued it, if not this one).
  absl::Status NotFound(absl::string_view handle) const;
  // A part's end; for the last one the tensor's relayout, then it is complete. Its error
  // (the relayout's) takes the tensor out.
  absl::Status PartFinished(const StoredTensor& tensor, int part, bool ok);
  // A complete upload's last step: a quantized tensor re-laid out in place as the policy
  // and its device say (tensor.layout set), its time observed. The tensor is not yet
  // visible to jobs.
  absl::Status Relayout(StoredTensor& tensor);
  void Publish(int device_index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The store's bytes on each of `devices` to the gauge (no lock needed).
  void PublishBytes(const std::vector<int>& devices);
  // The store's choice for a tensor of `tenant` (Placement above); -1: none healthy.
  int PickDevice(const std::string& tenant) const;
  // The index of the device named `name` ("" = PickDevice), healthy, or why not.
  absl::StatusOr<int> ResolveDevice(absl::string_view name, const std::string& tenant) const;
  void SweepLoop();

  const TensorStoreOptions options_;
  const std::vector<Device*> devices_;
  ServerMetrics* const metrics_;
  Clock* const clock_;
  const std::string instance_;
  std::shared_ptr<Accounts> accounts_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> tensors_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> tensors_per_device_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar stop_cv_;
  std::thread sweeper_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_STORE_TENSOR_STORE_H_
