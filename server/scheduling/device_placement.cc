#include "server/scheduling/device_placement.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace gemmd {

DevicePlacement::DevicePlacement(const std::vector<Device*>& devices) {
  max_batch_bytes_ = std::numeric_limits<int64_t>::max();
  for (Device* device : devices) {
    DeviceState state;
    state.device = device;
    state.lanes = std::max(1, device->lanes());
    state.free_lanes = state.lanes;
    state.healthy = device->healthy();
    if (state.healthy) ++healthy_;
    max_batch_bytes_ = std::min(max_batch_bytes_, device->max_batch_bytes());
    devices_.push_back(std::move(state));
  }
}

int DevicePlacement::Pick(int required) const {
  int best = -1;
  for (int i = 0; i < count(); ++i) {
    const DeviceState& d = devices_[i];
    if (!d.healthy || d.free_lanes <= 0 || (required >= 0 && i != required)) continue;
    if (best < 0 || d.outstanding_flops < devices_[best].outstanding_flops) best = i;
  }
  return best;
}

bool DevicePlacement::AnyIdle() const {
  for (const DeviceState& d : devices_) {
    if (d.healthy && d.free_lanes == d.lanes) return true;
  }
  return false;
}

void DevicePlacement::Place(int device, FormedBatch batch) {
  DeviceState& d = devices_[device];
  --d.free_lanes;
  d.outstanding_flops += batch.flops;
  d.placed.push_back(std::move(batch));
}

bool DevicePlacement::TakePlaced(int device, FormedBatch* batch) {
  DeviceState& d = devices_[device];
  if (d.placed.empty()) return false;
  *batch = std::move(d.placed.front());
  d.placed.pop_front();
  return true;
}

void DevicePlacement::Done(int device, double flops) {
  DeviceState& d = devices_[device];
  if (!d.healthy) return;
  ++d.free_lanes;
  d.outstanding_flops -= flops;
}

int DevicePlacement::MarkUnhealthy(int device) {
  DeviceState& d = devices_[device];
  if (!d.healthy) return -1;
  d.healthy = false;
  --healthy_;
  const int moved = static_cast<int>(d.placed.size());
  while (!d.placed.empty()) {
    d.outstanding_flops -= d.placed.front().flops;
    ++d.free_lanes;
    orphans_.push_back(std::move(d.placed.front()));
    d.placed.pop_front();
  }
  return moved;
}

FormedBatch DevicePlacement::TakeOrphan() {
  FormedBatch batch = std::move(orphans_.front());
  orphans_.pop_front();
  return batch;
}

}  // namespace gemmd
