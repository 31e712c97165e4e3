// The CPU backend as a Device: runs the kernels of kernels/cpu/cpu_kernels.h (OpenBLAS for
// FP32, faithful FP16-tensor emulation, the weight-only quantized kernel). Operands
// already live in host memory, so copies take no time. A launch runs its items one after
// another straight from the request buffers: packing them would only add copies
// (OpenBLAS gains nothing from one bigger call).
#ifndef GEMMD_SERVER_DEVICES_CPU_CPU_DEVICE_H_
#define GEMMD_SERVER_DEVICES_CPU_CPU_DEVICE_H_

#include "server/devices/backend.h"
#include "server/devices/device.h"

namespace gemmd {

class CpuDevice : public Device {
 public:
  explicit CpuDevice(int index);

  const DeviceDescription& description() const override { return description_; }
  // INVALID_ARGUMENT for a kernel that is not the CPU's (a wiring error) or operands
  // the kernel rejects.
  absl::Status Run(const DeviceLaunch& launch, int lane, LaunchTimes* times) override;
  bool healthy() const override { return true; }

 private:
  DeviceDescription description_;
};

// The CPU backend: `devices` CpuDevices (cpu:0, cpu:1, ...) and the CpuCatalogue. Each
// device runs its own launches, so several run at once; OpenBLAS's threads are shared.
Backend OpenCpuBackend(int devices = 1);

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CPU_CPU_DEVICE_H_
