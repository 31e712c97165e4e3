// A backend as the server holds it: its name (ServerInfo.backend), the catalogue that
// chooses kernels for every request, the devices that run them, and the allocator of
// the host buffers requests' operands and results live in.
#ifndef GEMMD_SERVER_DEVICES_BACKEND_H_
#define GEMMD_SERVER_DEVICES_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "server/devices/device.h"
#include "server/devices/host_allocator.h"
#include "server/devices/kernel_catalogue.h"

namespace gemmd {

struct Backend {
  std::string name;  // "cpu", "cuda"
  std::unique_ptr<KernelCatalogue> catalogue;
  std::vector<std::unique_ptr<Device>> devices;
  // Plain memory unless the devices read page-locked buffers faster (CUDA).
  std::shared_ptr<HostAllocator> host_allocator = PlainHostAllocator();
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_BACKEND_H_
