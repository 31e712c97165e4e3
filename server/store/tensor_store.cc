#include "server/store/tensor_store.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/observability/log.h"
#include "server/observability/thread_name.h"

namespace gemmd {
namespace {

constexpr absl::string_view kHandlePrefix = "t1-";
// How long a gone temporary's memory waits for the next temporary of its size (Accounts:
// spares): a striped call's next call comes within it; freed by the sweep after.
constexpr absl::Duration kSpareLinger = absl::Seconds(2);

// `bytes` random bytes in hex, from the kernel's generator (never a seeded PRNG: a handle
// is a capability, guessing one must be as hard as guessing 128 random bits).
std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(raw);
}

// The instance part of a handle, or "" when it is not one of ours in form.
absl::string_view InstanceOf(absl::string_view handle) {
  if (!absl::ConsumePrefix(&handle, kHandlePrefix)) return "";
  const size_t dash = handle.find('-');
  return dash == absl::string_view::npos ? "" : handle.substr(0, dash);
}

// At most this much of a client's handle goes into a message.
std::string Shown(absl::string_view handle) {
  std::string shown(handle.substr(0, 80));
  for (char& c : shown) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return handle.size() > 80 ? shown + "..." : shown;
}

}  // namespace

// Bytes taken from the cap and tensors alive, per device and per tenant; shared with the
// tensors' deleters, which give them back when the last pin of a tensor goes (possibly
// after the store itself).
//
// Spares: the memory of temporaries that went, kept a moment (kSpareLinger) for the next
// temporary of the same size on the same device. A striped call's temporaries come and go
// with every call, so reusing their memory saves an allocation and a free per tensor: on
// a GPU a cudaMalloc and a cudaFree, which waits for the whole device; on the CPU a fresh
// mapping's page faults. A spare stays counted in `used` and `per_device` (memory the
// store holds: the cap never pretends), not in `count` or any tenant's share; a tensor
// that finds the cap full has the spares freed first.
struct TensorStore::Accounts {
  struct Spare {
    Device* device = nullptr;
    int device_index = 0;
    void* memory = nullptr;
    int64_t bytes = 0;    // the allocation
    int64_t charged = 0;  // what it stays counted as
    absl::Time since;     // kept since (the store's clock)
  };

  absl::Mutex mu;
  int64_t used ABSL_GUARDED_BY(mu) = 0;
  int64_t count ABSL_GUARDED_BY(mu) = 0;
  std::vector<int64_t> per_device ABSL_GUARDED_BY(mu);
  // Per tenant ("" is everyone without authentication): bytes in all, and per device.
  absl::flat_hash_map<std::string, int64_t> per_tenant ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, std::vector<int64_t>> per_tenant_device ABSL_GUARDED_BY(mu);
  // Uploads open per tenant (max_open_uploads).
  absl::flat_hash_map<std::string, int64_t> open ABSL_GUARDED_BY(mu);
  std::vector<Spare> spares ABSL_GUARDED_BY(mu);  // oldest first
  bool closed ABSL_GUARDED_BY(mu) = false;        // the store is gone: keep no spare

  // Takes `bytes` of `cap` and one of `max_tensors` for `device` (and of `tenant_cap` for
  // `tenant`, when both are set), or RESOURCE_EXHAUSTED with what was asked and free.
  // With `reuse` (a temporary of an `allocation`-byte allocation), a spare of that size
  // on that device is taken instead of new room where there is one: its memory in
  // *reused (null: none, allocate).
  absl::Status Take(int64_t bytes, int64_t cap, int64_t max_tensors, int device,
                    const std::string& tenant, int64_t tenant_cap, bool reuse,
                    int64_t allocation, void** reused) {
    absl::MutexLock lock(&mu);
    *reused = nullptr;
    auto spare = spares.end();
    if (reuse) {
      for (auto it = spares.rbegin(); it != spares.rend(); ++it) {  // the newest first
        if (it->device_index == device && it->bytes == allocation && it->charged == bytes &&
            it->device->healthy()) {
          spare = std::prev(it.base());
          break;
        }
      }
    }
    if (spare != spares.end()) {
      // Already counted in `used`: the cap has room for it.
    } else if (bytes > cap) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this tensor needs ", bytes, " bytes of the tensor store, more than its whole cap of ",
          cap, " (--tensor_store_bytes)"));
    }
    if (bytes > cap - used) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the tensor store is full: this tensor needs ", bytes, " bytes and ",
                       std::max<int64_t>(0, cap - used), " of ", cap,
                       " are free (--tensor_store_bytes); delete tensors or let them expire"));
    }
    if (max_tensors > 0 && count >= max_tensors) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the tensor store holds ", count, " tensors, its most (--tensor_store_max_tensors=",
          max_tensors, "); delete tensors or let them expire"));
    }
    const auto it = per_tenant.find(tenant);
    const int64_t tenant_used = it == per_tenant.end() ? 0 : it->second;
    if (!tenant.empty() && tenant_cap > 0 && bytes > tenant_cap - tenant_used) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant ", tenant, "'s share of the tensor store is full: this tensor needs ", bytes,
          " bytes and ", std::max<int64_t>(0, tenant_cap - tenant_used), " of ", tenant_cap,
          " are free (--tenant_tensor_store_bytes); delete tensors or let them expire"));
    }
    if (spare != spares.end()) {
      *reused = spare->memory;
      spares.erase(spare);
    } else {
      used += bytes;
      per_device[device] += bytes;
    }
    ++count;
    per_tenant[tenant] += bytes;
    std::vector<int64_t>& mine = per_tenant_device[tenant];
    mine.resize(per_device.size(), 0);
    mine[device] += bytes;
    return absl::OkStatus();
  }
  void Give(int64_t bytes, int device, const std::string& tenant) {
    absl::MutexLock lock(&mu);
    used -= bytes;
    per_device[device] -= bytes;
    ReleaseTenantLocked(bytes, device, tenant);
  }
  // A tensor's share of `count` and of its tenant's bytes.
  void ReleaseTenantLocked(int64_t bytes, int device, const std::string& tenant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    --count;
    auto it = per_tenant.find(tenant);
    if (it != per_tenant.end() && (it->second -= bytes) == 0) {
      per_tenant.erase(it);
      per_tenant_device.erase(tenant);
    } else if (auto mine = per_tenant_device.find(tenant); mine != per_tenant_device.end()) {
      mine->second[device] -= bytes;
    }
  }
  // Keeps a temporary's memory as a spare from now on (true), unless the store is gone
  // (false: free it and Give). `clock` is the store's: read only while it is there.
  bool KeepSpare(const StoredTensor& t, Clock* clock) {
    absl::MutexLock lock(&mu);
    if (closed) return false;
    ReleaseTenantLocked(t.charged, t.device_index, t.tenant);
    spares.push_back({t.device, t.device_index, t.memory, t.bytes, t.charged, clock->Now()});
    return true;
  }
  // Takes out the spares kept since before `before` (all: InfiniteFuture) for the caller
  // to free (FreeSpares); `close` also keeps none from now on.
  std::vector<Spare> TakeSpares(absl::Time before, bool close = false) {
    absl::MutexLock lock(&mu);
    if (close) closed = true;
    std::vector<Spare> out;
    auto it = spares.begin();
    while (it != spares.end() && it->since < before) out.push_back(*it++);
    spares.erase(spares.begin(), it);
    return out;
  }
  bool HasSpares() {
    absl::MutexLock lock(&mu);
    return !spares.empty();
  }
  // Frees spares taken out: their bytes leave the cap (those whose memory the device
  // could not free stay counted, as any tensor's). Returns the devices touched.
  std::vector<int> FreeSpares(const std::vector<Spare>& gone) {
    std::vector<int> devices;
    for (const Spare& spare : gone) {
      const absl::Status freed = spare.device->FreeResident(spare.memory, spare.bytes);
      if (!freed.ok()) {
        Log(LogLevel::kError, "resident_free_failed",
            {{"bytes", absl::StrCat(spare.bytes)},
             {"device", spare.device->description().name},
             {"message", std::string(freed.message())},
             {"counted", "the bytes stay counted against --tensor_store_bytes"}});
        continue;
      }
      absl::MutexLock lock(&mu);
      used -= spare.charged;
      per_device[spare.device_index] -= spare.charged;
      devices.push_back(spare.device_index);
    }
    return devices;
  }
  int64_t Used() {
    absl::MutexLock lock(&mu);
    return used;
  }
  int64_t Count() {
    absl::MutexLock lock(&mu);
    return count;
  }
  int64_t UsedOn(int device) {
    absl::MutexLock lock(&mu);
    return per_device[device];
  }
  // The tenant's bytes per device (empty when it holds none).
  std::vector<int64_t> TenantUse(const std::string& tenant) {
    absl::MutexLock lock(&mu);
    const auto it = per_tenant_device.find(tenant);
    return it == per_tenant_device.end() ? std::vector<int64_t>() : it->second;
  }
};

TensorStore::TensorStore(TensorStoreOptions options, std::vector<Device*> devices,
                         ServerMetrics* metrics, Clock* clock)
    : options_(options),
      devices_(std::move(devices)),
      metrics_(metrics),
      clock_(clock),
      instance_(RandomHex(8)),
      accounts_(std::make_shared<Accounts>()) {
  {
    absl::MutexLock lock(&accounts_->mu);
    accounts_->per_device.assign(devices_.size(), 0);
  }
  {
    absl::MutexLock lock(&mu_);
    tensors_per_device_.assign(devices_.size(), 0);
    for (size_t d = 0; d < devices_.size(); ++d) Publish(static_cast<int>(d));
  }
  sweeper_ = std::thread([this] {
    NameThisThread("gemmd-sweeper");
    SweepLoop();
  });
}

TensorStore::~TensorStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  sweeper_.join();
  accounts_->FreeSpares(accounts_->TakeSpares(absl::InfiniteFuture(), /*close=*/true));
}

int64_t TensorStore::used_bytes() const { return accounts_->Used(); }

int64_t TensorStore::tensor_count() const { return accounts_->Count(); }

int64_t TensorStore::ChargeFor(int64_t bytes, int device_index) const {
  return devices_[device_index]->ResidentFootprint(std::max<int64_t>(bytes, 1)) +
         kTensorRecordBytes;
}

absl::StatusOr<std::shared_ptr<void>> TensorStore::OpenSlot(const std::string& tenant) {
  if (options_.max_open_uploads <= 0) return std::shared_ptr<void>();
  std::shared_ptr<Accounts> accounts = accounts_;
  {
    absl::MutexLock lock(&accounts->mu);
    int64_t& open = accounts->open[tenant];
    if (open >= options_.max_open_uploads) {
      return absl::ResourceExhaustedError(absl::StrCat(
          tenant.empty() ? std::string("this server") : absl::StrCat("tenant ", tenant), " has ",
          open, " uploads open, its most (--max_open_uploads=", options_.max_open_uploads,
          "); finish or cancel one first"));
    }
    ++open;
  }
  // The slot's "pointer" is the accounts; its deleter gives the place back.
  return std::shared_ptr<void>(accounts.get(), [accounts, tenant](void*) {
    absl::MutexLock lock(&accounts->mu);
    auto it = accounts->open.find(tenant);
    if (it != accounts->open.end() && --it->second <= 0) accounts->open.erase(it);
  });
}

void TensorStore::PublishBytes(const std::vector<int>& devices) {
  if (metrics_ == nullptr) return;
  for (int d : devices) metrics_->SetTensorStoreBytes(d, accounts_->UsedOn(d));
}

void TensorStore::Publish(int device_index) {
  if (metrics_ == nullptr) return;
  metrics_->SetTensorStoreBytes(device_index, accounts_->UsedOn(device_index));
  metrics_->SetTensorStoreTensors(device_index, tensors_per_device_[device_index]);
}

absl::Status TensorStore::CheckTtl(absl::Duration ttl) const {
  if (ttl < absl::ZeroDuration() || ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_s ", absl::ToInt64Seconds(ttl),
                                                   " is out of range; expected 0 (no expiry) to ",
                                                   absl::ToInt64Seconds(options_.max_ttl)));
  }
  return absl::OkStatus();
}

int TensorStore::PickDevice(const std::string& tenant) const {
  // With the tenant's other tensors, so that a GEMM finds its operands on one device;
  // a tenant's first tensor where the fewest resident bytes are (tenants spread).
  const std::vector<int64_t> mine = accounts_->TenantUse(tenant);
  int best = -1;
  int64_t best_mine = 0, best_bytes = 0;
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!devices_[d]->healthy()) continue;
    const int64_t own = d < mine.size() ? mine[d] : 0;
    const int64_t used = accounts_->UsedOn(static_cast<int>(d));
    if (best < 0 || own > best_mine || (own == best_mine && used < best_bytes)) {
      best = static_cast<int>(d);
      best_mine = own;
      best_bytes = used;
    }
  }
  return best;
}

absl::Status StoredTensor::CheckDeviceHealthy() const {
  if (device->healthy()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "tensor ", handle, " is resident on ", DeviceId(device->description()),
      ", which has faulted: the tensor is lost (delete it and upload it again; a new upload "
      "goes to a healthy device)"));
}

absl::StatusOr<int> TensorStore::ResolveDevice(absl::string_view name,
                                               const std::string& tenant) const {
  if (name.empty()) {
    const int picked = PickDevice(tenant);
    if (picked < 0) return absl::UnavailableError("no healthy device to keep the tensor on");
    return picked;
  }
  if (name.size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.device has ", name.size(), " bytes; expected a device id such as cuda:1"));
  }
  // A device answers to its short id ("cuda:1") and to its whole name as listed
  // ("cuda:1 (NVIDIA H200)").
  std::vector<std::string> ids;
  for (size_t d = 0; d < devices_.size(); ++d) {
    const DeviceDescription& description = devices_[d]->description();
    const std::string id = DeviceId(description);
    if (name != id && name != description.name) {
      ids.push_back(id);
      continue;
    }
    if (!devices_[d]->healthy()) {
      return absl::UnavailableError(absl::StrCat(
          "header.device ", id, " has faulted; it keeps no tensors (leave the field empty "
          "for a healthy device)"));
    }
    return static_cast<int>(d);
  }
  return absl::InvalidArgumentError(absl::StrCat("header.device \"", absl::CHexEscape(name),
                                                 "\" is no device of this server; its devices: ",
                                                 absl::StrJoin(ids, ", ")));
}

std::string TensorStore::NewHandle() const {
  return absl::StrCat(kHandlePrefix, instance_, "-", RandomHex(16));
}

absl::StatusOr<std::shared_ptr<StoredTensor>> TensorStore::Create(const TensorSpec& spec,
                                                                  int device_index,
                                                                  absl::Duration ttl,
                                                                  std::string label,
                                                                  std::string tenant,
                                                                  bool temporary) {
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return s;
  if (absl::Status s = CheckTtl(ttl); !s.ok()) return s;
  if (label.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.label has ", label.size(), " bytes; at most 256 are kept"));
  }
  if (device_index < 0 || device_index >= static_cast<int>(devices_.size()) ||
      !devices_[device_index]->healthy()) {
    return absl::UnavailableError("no healthy device to keep the tensor on");
  }
  const int64_t bytes = StoredBytes(spec);
  const int64_t charged = ChargeFor(bytes, device_index);
  // The caps first, then the memory: nothing is allocated for a tensor that cannot stay.
  const int64_t allocation = std::max<int64_t>(bytes, 1);
  void* reused = nullptr;
  auto take = [&] {
    return accounts_->Take(charged, options_.cap_bytes, options_.max_tensors, device_index,
                           tenant, options_.tenant_cap_bytes, temporary, allocation, &reused);
  };
  absl::Status taken = take();
  if (!taken.ok() && taken.code() == absl::StatusCode::kResourceExhausted &&
      accounts_->HasSpares()) {
    ReleaseSpares();  // spares give way to a tensor
    taken = take();
  }
  if (!taken.ok()) return taken;
  Device* device = devices_[device_index];
  absl::StatusOr<void*> memory =
      reused != nullptr ? absl::StatusOr<void*>(reused) : device->AllocateResident(allocation);
  if (!memory.ok()) {
    accounts_->Give(charged, device_index, tenant);
    return absl::ResourceExhaustedError(absl::StrCat("no memory for a ", bytes, "-byte tensor on ",
                                                     device->description().name, ": ",
                                                     memory.status().message()));
  }
  if (metrics_ != nullptr) {
    metrics_->SetTensorStoreBytes(device_index, accounts_->UsedOn(device_index));
  }
  std::shared_ptr<Accounts> accounts = accounts_;
  ServerMetrics* metrics = metrics_;
  Clock* clock = clock_;
  auto free_tensor = [accounts, metrics, clock](StoredTensor* t) {
    // A temporary's memory waits a moment for the next one (Accounts: spares).
    if (t->temporary && t->device->healthy() && accounts->KeepSpare(*t, clock)) {
      delete t;
      return;
    }
    const absl::Status freed = t->device->FreeResident(t->memory, std::max<int64_t>(t->bytes, 1));
    if (freed.ok()) {
      accounts->Give(t->charged, t->device_index, t->tenant);
    } else {
      // The memory is still taken: it stays counted, so the cap never hides it.
      Log(LogLevel::kError, "resident_free_failed",
          {{"handle", t->handle},
           {"bytes", absl::StrCat(t->bytes)},
           {"device", t->device->description().name},
           {"message", std::string(freed.message())},
           {"counted", "the bytes stay counted against --tensor_store_bytes"}});
    }
    if (metrics != nullptr) {
      metrics->SetTensorStoreBytes(t->device_index, accounts->UsedOn(t->device_index));
    }
    delete t;
  };
  std::shared_ptr<StoredTensor> tensor(new StoredTensor(), free_tensor);
  tensor->handle = NewHandle();
  tensor->spec = spec;
  tensor->device_index = device_index;
  tensor->device = device;
  tensor->memory = *memory;
  tensor->bytes = bytes;
  tensor->charged = charged;
  tensor->created = clock_->Now();
  if (ttl > absl::ZeroDuration()) tensor->expires = tensor->created + ttl;
  tensor->label = std::move(label);
  tensor->tenant = std::move(tenant);
  tensor->temporary = temporary;
  return tensor;
}

absl::StatusOr<TensorStore::Opened> TensorStore::OpenUpload(const TensorSpec& spec,
                                                            absl::Duration ttl,
                                                            std::string label,
                                                            std::string tenant,
                                                            absl::string_view device,
                                                            bool temporary) {
  absl::StatusOr<int> device_index = ResolveDevice(device, tenant);
  if (!device_index.ok()) return device_index.status();
  absl::StatusOr<std::shared_ptr<void>> slot = OpenSlot(tenant);
  if (!slot.ok()) return slot.status();
  absl::StatusOr<std::shared_ptr<StoredTensor>> tensor =
      Create(spec, *device_index, ttl, std::move(label), std::move(tenant), temporary);
  if (!tensor.ok()) return tensor.status();
  return Opened{*std::move(tensor), *std::move(slot)};
}

absl::StatusOr<std::unique_ptr<TensorStore::Upload>> TensorStore::Begin(const TensorSpec& spec,
                                                                        absl::Duration ttl,
                                                                        std::string label,
                                                                        std::string tenant,
                                                                        absl::string_view device,
                                                                        bool temporary) {
  absl::StatusOr<Opened> opened =
      OpenUpload(spec, ttl, std::move(label), std::move(tenant), device, temporary);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<Upload> upload(new Upload());
  upload->store_ = this;
  upload->tensor_ = std::move(opened->tensor);
  upload->open_slot_ = std::move(opened->slot);
  upload->data_bytes_ = DataBytes(spec);
  upload->scales_bytes_ = ScaleBytes(spec);
  upload->checker_ = ScaleChecker(spec, 0);
  return upload;
}

absl::StatusOr<std::string> TensorStore::OpenParts(const TensorSpec& spec, absl::Duration ttl,
                                                   std::string label, int parts,
                                                   std::string tenant,
                                                   absl::string_view device, bool temporary) {
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return s;
  if (parts < 2 || parts > Rows(spec) || parts > static_cast<int>(kMaxParts)) {
    return absl::InvalidArgumentError(absl::StrCat("header.parts is ", parts,
                                                   "; expected 2 to min(", kMaxParts,
                                                   ", rows = ", Rows(spec), ")"));
  }
  absl::StatusOr<Opened> opened =
      OpenUpload(spec, ttl, std::move(label), std::move(tenant), device, temporary);
  if (!opened.ok()) return opened.status();
  // Until every part is in, the tensor has no TTL; the sweep drops it when no part has
  // been uploading for part_upload_timeout.
  opened->tensor->expires = absl::InfiniteFuture();
  Entry entry;
  entry.tensor = opened->tensor;
  entry.complete = false;
  entry.parts.assign(static_cast<size_t>(parts), 0);
  entry.last_part_activity = clock_->Now();
  entry.ttl = ttl;
  entry.open_slot = std::move(opened->slot);
  const std::string handle = entry.tensor->handle;
  absl::MutexLock lock(&mu_);
  ++tensors_per_device_[entry.tensor->device_index];
  Publish(entry.tensor->device_index);
  tensors_.emplace(handle, std::move(entry));
  return handle;
}

absl::StatusOr<std::unique_ptr<TensorStore::Upload>> TensorStore::BeginPart(
    absl::string_view handle, int part, absl::string_view tenant) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(handle);
  if (it == tensors_.end() || it->second.tensor->tenant != tenant) return NotFound(handle);
  Entry& entry = it->second;
  if (entry.complete) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor ", Shown(handle), " is complete; parts go to an open tensor only"));
  }
  const int parts = static_cast<int>(entry.parts.size());
  if (part < 0 || part >= parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.part is ", part, "; tensor ", Shown(handle), " has parts 0 to ",
                     parts - 1));
  }
  if (entry.parts[part] != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "part ", part, " of tensor ", Shown(handle), " is already ",
        entry.parts[part] == 1 ? "being uploaded" : "uploaded"));
  }
  entry.parts[part] = 1;
  ++entry.parts_uploading;
  entry.last_part_activity = clock_->Now();
  const TensorSpec& spec = entry.tensor->spec;
  const int64_t rows = Rows(spec);
  const int64_t first = rows * part / parts;
  const int64_t last = rows * (part + 1) / parts;
  std::unique_ptr<Upload> upload(new Upload());
  upload->store_ = this;
  upload->tensor_ = entry.tensor;
  upload->part_ = part;
  upload->data_begin_ = first * RowDataBytes(spec);
  upload->data_bytes_ = (last - first) * RowDataBytes(spec);
  upload->scales_begin_ = first * RowScaleBytes(spec);
  upload->scales_bytes_ = (last - first) * RowScaleBytes(spec);
  upload->checker_ = ScaleChecker(spec, upload->scales_begin_);
  return upload;
}

absl::Status TensorStore::Upload::Append(absl::string_view data, absl::string_view scales) {
  std::vector<absl::string_view> d, s;
  if (!data.empty()) d.push_back(data);
  if (!scales.empty()) s.push_back(scales);
  return AppendRuns(d, s);
}

absl::Status TensorStore::Upload::AppendRuns(const std::vector<absl::string_view>& data,
                                             const std::vector<absl::string_view>& scales) {
  int64_t d = 0, s = 0;
  for (absl::string_view run : data) d += static_cast<int64_t>(run.size());
  for (absl::string_view run : scales) s += static_cast<int64_t>(run.size());
  if (d > data_bytes_ - data_done_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data runs past the tensor's end: ", data_done_ + d, " bytes sent; ",
        part_ < 0 ? absl::StrCat(SpecText(tensor_->spec), " has ")
                  : absl::StrCat("part ", part_, " has "),
        data_bytes_));
  }
  if (s > scales_bytes_ - scales_done_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scales run past the tensor's end: ", scales_done_ + s, " bytes sent; ",
        part_ < 0 ? absl::StrCat(SpecText(tensor_->spec), " has ")
                  : absl::StrCat("part ", part_, " has "),
        scales_bytes_));
  }
  for (absl::string_view run : scales) {
    if (absl::Status bad = checker_.Check(run); !bad.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("scales: ", bad.message()));
    }
  }
  char* memory = static_cast<char*>(tensor_->memory);
  if (d > 0) {
    if (absl::Status e =
            tensor_->device->WriteResidentRuns(memory + data_begin_ + data_done_, data);
        !e.ok()) {
      return absl::Status(e.code(), absl::StrCat("storing data: ", e.message()));
    }
    data_done_ += d;
  }
  if (s > 0) {
    if (absl::Status e = tensor_->device->WriteResidentRuns(
            memory + ScalesOffset(tensor_->spec) + scales_begin_ + scales_done_, scales);
        !e.ok()) {
      return absl::Status(e.code(), absl::StrCat("storing scales: ", e.message()));
    }
    scales_done_ += s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TensorStore::Upload::Finish() {
  if (data_done_ != data_bytes_ || scales_done_ != scales_bytes_) {
    std::string what = part_ < 0 ? SpecText(tensor_->spec) : absl::StrCat("part ", part_);
    return absl::InvalidArgumentError(absl::StrCat(
        "the stream ended after ", data_done_, " data bytes",
        scales_bytes_ > 0 ? absl::StrCat(" and ", scales_done_, " scale bytes") : "", "; ",
        what, " needs ", data_bytes_,
        scales_bytes_ > 0 ? absl::StrCat(" and ", scales_bytes_, " scale bytes") : ""));
  }
  finished_ = true;
  if (part_ >= 0) {
    if (absl::Status s = store_->PartFinished(*tensor_, part_, true); !s.ok()) return s;
    return tensor_->handle;
  }
  // A failed relayout leaves nothing: the tensor goes with this upload.
  if (absl::Status s = store_->Relayout(*tensor_); !s.ok()) return s;
  open_slot_.reset();
  return store_->Commit(tensor_);
}

TensorStore::Upload::~Upload() {
  if (!finished_ && part_ >= 0 && tensor_ != nullptr) {
    store_->PartFinished(*tensor_, part_, false).IgnoreError();  // a failed part: no relayout
  }
}

absl::Status TensorStore::PartFinished(const StoredTensor& tensor, int part, bool ok) {
  std::shared_ptr<StoredTensor> last;  // set when this part was the last
  {
    std::shared_ptr<StoredTensor> dropped;  // released after the lock
    absl::MutexLock lock(&mu_);
    auto it = tensors_.find(tensor.handle);
    if (it == tensors_.end() || it->second.tensor.get() != &tensor) {
      return absl::OkStatus();  // already gone
    }
    Entry& entry = it->second;
    --entry.parts_uploading;
    entry.last_part_activity = clock_->Now();
    if (!ok) {
      Log(LogLevel::kWarning, "tensor_upload_aborted",
          {{"handle", tensor.handle}, {"part", absl::StrCat(part)}, {"tenant", tensor.tenant}});
      dropped = EraseLocked(it);
      return absl::OkStatus();
    }
    entry.parts[part] = 2;
    if (++entry.parts_done < static_cast<int>(entry.parts.size())) return absl::OkStatus();
    // Still incomplete (jobs cannot pin it) and counted as uploading (the sweep leaves it)
    // while it is re-laid out, outside the lock.
    ++entry.parts_uploading;
    last = entry.tensor;
  }
  const absl::Status relaid = Relayout(*last);
  std::shared_ptr<StoredTensor> dropped;
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(last->handle);
  if (it == tensors_.end() || it->second.tensor != last) return relaid;  // deleted meanwhile
  Entry& entry = it->second;
  --entry.parts_uploading;
  if (!relaid.ok()) {
    Log(LogLevel::kWarning, "tensor_upload_aborted",
        {{"handle", tensor.handle},
         {"error", std::string(relaid.message())},
         {"tenant", tensor.tenant}});
    dropped = EraseLocked(it);
    return relaid;
  }
  entry.complete = true;
  entry.open_slot.reset();
  entry.tensor->expires =
      entry.ttl > absl::ZeroDuration() ? clock_->Now() + entry.ttl : absl::InfiniteFuture();
  Log(LogLevel::kInfo, "tensor_put",
      {{"handle", tensor.handle},
       {"tensor", SpecText(tensor.spec)},
       {"bytes", absl::StrCat(tensor.bytes)},
       {"device", tensor.device->description().name},
       {"parts", absl::StrCat(entry.parts.size())},
       {"layout", WeightLayoutName(tensor.layout)},
       {"label", tensor.label},
       {"tenant", tensor.tenant}});
  return absl::OkStatus();
}

absl::Status TensorStore::Relayout(StoredTensor& tensor) {
  if (!tensor.spec.quantized) return absl::OkStatus();
  const int64_t rows = tensor.spec.shape[0], k = tensor.spec.shape[1];
  WeightLayout layout = WeightLayout::kCanonical;
  if (options_.quantized_layout == QuantizedLayoutPolicy::kAuto) {
    layout = tensor.device->PreferredWeightLayout(tensor.spec.format, rows, k);
  } else if (options_.quantized_layout == QuantizedLayoutPolicy::kSwapAb &&
             Nvfp4SwapAbFits(rows, k)) {
    layout = WeightLayout::kSwapAb;
  }
  if (layout == WeightLayout::kCanonical) return absl::OkStatus();
  const absl::Time start = absl::Now();
  char* const memory = static_cast<char*>(tensor.memory);
  if (absl::Status s = tensor.device->RelayoutResident(tensor.spec.format, rows, k, memory,
                                                       memory + ScalesOffset(tensor.spec), layout);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("re-laying out ", SpecText(tensor.spec), " (",
                                               WeightLayoutName(layout), "): ", s.message(),
                                               "; nothing was stored"));
  }
  tensor.layout = layout;
  if (metrics_ != nullptr) metrics_->ObserveRelayout(absl::Now() - start);
  return absl::OkStatus();
}

std::shared_ptr<StoredTensor> TensorStore::EraseLocked(
    absl::flat_hash_map<std::string, Entry>::iterator it) {
  std::shared_ptr<StoredTensor> tensor = std::move(it->second.tensor);
  tensors_.erase(it);
  --tensors_per_device_[tensor->device_index];
  Publish(tensor->device_index);
  return tensor;
}

absl::StatusOr<std::shared_ptr<StoredTensor>> TensorStore::Allocate(const TensorSpec& spec,
                                                                    int device_index,
                                                                    absl::Duration ttl,
                                                                    std::string label,
                                                                    std::string tenant,
                                                                    bool temporary) {
  const int device = device_index >= 0 ? device_index : PickDevice(tenant);
  return Create(spec, device, ttl, std::move(label), std::move(tenant), temporary);
}

absl::StatusOr<std::string> TensorStore::Commit(std::shared_ptr<StoredTensor> tensor) {
  Entry entry;
  entry.tensor = std::move(tensor);
  const StoredTensor& t = *entry.tensor;
  // A TTL counts from when the tensor is complete.
  if (t.expires != absl::InfiniteFuture()) {
    entry.tensor->expires = clock_->Now() + (t.expires - t.created);
  }
  Log(LogLevel::kInfo, "tensor_put",
      {{"handle", t.handle},
       {"tensor", SpecText(t.spec)},
       {"bytes", absl::StrCat(t.bytes)},
       {"device", t.device->description().name},
       {"layout", WeightLayoutName(t.layout)},
       {"label", t.label},
       {"tenant", t.tenant}});
  const std::string handle = t.handle;
  absl::MutexLock lock(&mu_);
  ++tensors_per_device_[t.device_index];
  Publish(t.device_index);
  tensors_.emplace(handle, std::move(entry));
  return handle;
}

absl::Status TensorStore::NotFound(absl::string_view handle) const {
  const absl::string_view instance = InstanceOf(handle);
  if (!instance.empty() && instance != instance_) {
    return absl::NotFoundError(absl::StrCat("tensor ", Shown(handle),
                                            " was issued by server instance ", Shown(instance),
                                            "; this is instance ", instance_,
                                            " (resident tensors live on the replica that "
                                            "stored them)"));
  }
  return absl::NotFoundError(absl::StrCat("no tensor ", Shown(handle),
                                          " on this server (never stored, deleted, or "
                                          "expired)"));
}

const TensorStore::Entry* TensorStore::FindLiveLocked(absl::string_view handle,
                                                     absl::string_view tenant) const {
  auto it = tensors_.find(handle);
  if (it == tensors_.end() || it->second.tensor->tenant != tenant ||
      it->second.tensor->expires <= clock_->Now()) {
    return nullptr;
  }
  return &it->second;
}

absl::StatusOr<TensorPin> TensorStore::Acquire(absl::string_view handle,
                                               absl::string_view tenant) {
  absl::MutexLock lock(&mu_);
  const Entry* found = FindLiveLocked(handle, tenant);
  if (found == nullptr) return NotFound(handle);
  const Entry& entry = *found;
  if (!entry.complete) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor ", Shown(handle), " is still uploading: ", entry.parts_done, " of ",
                     entry.parts.size(), " parts arrived"));
  }
  return TensorPin(entry.tensor);
}

absl::StatusOr<std::string> TensorStore::DeviceOf(absl::string_view handle,
                                                  absl::string_view tenant) {
  absl::MutexLock lock(&mu_);
  const Entry* entry = FindLiveLocked(handle, tenant);
  if (entry == nullptr) return NotFound(handle);
  return DeviceId(entry->tensor->device->description());
}

absl::Status TensorStore::Delete(absl::string_view handle, absl::string_view tenant) {
  std::shared_ptr<StoredTensor> tensor;  // released after the lock
  {
    absl::MutexLock lock(&mu_);
    auto it = tensors_.find(handle);
    if (it == tensors_.end() || it->second.tensor->tenant != tenant) return NotFound(handle);
    tensor = EraseLocked(it);
  }
  Log(LogLevel::kInfo, "tensor_deleted",
      {{"handle", tensor->handle}, {"bytes", absl::StrCat(tensor->bytes)},
       {"in_use", absl::StrCat(tensor.use_count() - 1)}});
  return absl::OkStatus();
}

std::vector<TensorListing> TensorStore::List(absl::string_view tenant) {
  std::vector<TensorListing> out;
  absl::MutexLock lock(&mu_);
  out.reserve(tensors_.size());
  for (const auto& [handle, entry] : tensors_) {
    const StoredTensor& t = *entry.tensor;
    if (t.tenant != tenant) continue;
    out.push_back({handle, t.spec, t.charged, t.device->description().name, t.created, t.expires,
                   t.label, entry.complete});
  }
  std::sort(out.begin(), out.end(), [](const TensorListing& a, const TensorListing& b) {
    return a.created < b.created || (a.created == b.created && a.handle < b.handle);
  });
  return out;
}

bool TensorStore::IsTemporary(absl::string_view handle, absl::string_view tenant) {
  absl::MutexLock lock(&mu_);
  const Entry* entry = FindLiveLocked(handle, tenant);
  return entry != nullptr && entry->tensor->temporary;
}

int64_t TensorStore::TemporaryCount() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  int64_t count = 0;
  for (const auto& [handle, entry] : tensors_) {
    count += entry.tensor->temporary && entry.tensor->expires > now ? 1 : 0;
  }
  return count;
}

void TensorStore::Sweep() {
  std::vector<std::shared_ptr<StoredTensor>> gone;  // released after the lock
  int64_t expired = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto it = tensors_.begin(); it != tensors_.end();) {
      auto next = std::next(it);
      const Entry& entry = it->second;
      const StoredTensor& t = *entry.tensor;
      const bool expires = entry.complete && t.expires <= now;
      const bool abandoned = !entry.complete && entry.parts_uploading == 0 &&
                             now - entry.last_part_activity >= options_.part_upload_timeout;
      if (expires || abandoned) {
        Log(LogLevel::kInfo, expires ? "tensor_expired" : "tensor_upload_timed_out",
            {{"handle", t.handle},
             {"bytes", absl::StrCat(t.bytes)},
             {"label", t.label},
             {"tenant", t.tenant}});
        if (expires) ++expired;
        gone.push_back(EraseLocked(it));
      }
      it = next;
    }
  }
  if (metrics_ != nullptr && expired > 0) metrics_->AddTensorsExpired(expired);
  PublishBytes(accounts_->FreeSpares(accounts_->TakeSpares(clock_->Now() - kSpareLinger)));
}

int64_t TensorStore::DropTenantsOtherThan(const std::vector<std::string>& tenants) {
  const absl::flat_hash_set<std::string> kept(tenants.begin(), tenants.end());
  std::vector<std::shared_ptr<StoredTensor>> gone;  // released after the lock
  {
    absl::MutexLock lock(&mu_);
    for (auto it = tensors_.begin(); it != tensors_.end();) {
      auto next = std::next(it);
      const std::string& tenant = it->second.tensor->tenant;
      if (!tenant.empty() && !kept.contains(tenant)) gone.push_back(EraseLocked(it));
      it = next;
    }
  }
  for (const auto& t : gone) {
    Log(LogLevel::kInfo, "tensor_deleted",
        {{"handle", t->handle},
         {"bytes", absl::StrCat(t->bytes)},
         {"tenant", t->tenant},
         {"why", "its tenant is no longer in the tokens file"}});
  }
  return static_cast<int64_t>(gone.size());
}

void TensorStore::ReleaseSpares() {
  PublishBytes(accounts_->FreeSpares(accounts_->TakeSpares(absl::InfiniteFuture())));
}

void TensorStore::SweepLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    stop_cv_.WaitWithTimeout(&mu_, options_.sweep_interval);
    if (stopping_) break;
    mu_.Unlock();
    Sweep();
    mu_.Lock();
  }
}

}  // namespace gemmd
