// The devices as the batcher places work on them: each one's lanes, the work placed on
// it and not yet done (FLOPs), its health, the batches placed on it that no lane has
// taken yet, and the batches a faulted device left behind (orphans) for the others.
// A batch goes to the healthy device with a free lane and the least outstanding work.
// Not thread-safe: the Batcher's lock guards it.
#ifndef GEMMD_SERVER_SCHEDULING_DEVICE_PLACEMENT_H_
#define GEMMD_SERVER_SCHEDULING_DEVICE_PLACEMENT_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "server/devices/device.h"
#include "server/scheduling/batch.h"

namespace gemmd {

class DevicePlacement {
 public:
  // `devices` must outlive this; their health is read once, here.
  explicit DevicePlacement(const std::vector<Device*>& devices);

  int count() const { return static_cast<int>(devices_.size()); }
  Device* device(int index) const { return devices_[index].device; }
  bool healthy(int index) const { return devices_[index].healthy; }
  int healthy_devices() const { return healthy_; }
  // The least any device takes in one launch (Device::max_batch_bytes): a batch within it
  // fits whichever device takes it.
  int64_t max_batch_bytes() const { return max_batch_bytes_; }

  // The healthy device with a free lane and the least outstanding work, only `required`
  // when >= 0; -1 when none.
  int Pick(int required = -1) const;
  // Whether some healthy device has every lane free.
  bool AnyIdle() const;

  // `batch` goes to `device` (Pick's): one of its lanes is taken, its FLOPs outstanding.
  void Place(int device, FormedBatch batch);
  // The oldest batch placed on `device` and not yet taken, for one of its lanes; false
  // when there is none.
  bool TakePlaced(int device, FormedBatch* batch);
  // A lane of `device` is done with a batch of `flops`: the lane is free again (on a
  // healthy device; a faulted one's lanes no longer count).
  void Done(int device, double flops);

  // `device` faulted: it gets no more work, and the batches placed on it but not taken
  // become orphans. How many moved, or -1 when it was already marked.
  int MarkUnhealthy(int device);

  bool has_orphans() const { return !orphans_.empty(); }
  // The oldest orphan (has_orphans()).
  const FormedBatch& next_orphan() const { return orphans_.front(); }
  FormedBatch TakeOrphan();

 private:
  struct DeviceState {
    Device* device = nullptr;
    int lanes = 0;
    int free_lanes = 0;
    double outstanding_flops = 0;
    bool healthy = true;
    std::deque<FormedBatch> placed;  // not yet taken by a lane
  };

  std::deque<DeviceState> devices_;
  std::deque<FormedBatch> orphans_;
  int healthy_ = 0;
  int64_t max_batch_bytes_ = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_DEVICE_PLACEMENT_H_
