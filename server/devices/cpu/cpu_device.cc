#include "server/devices/cpu/cpu_device.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_gemm.h"
#include "server/devices/cpu/cpu_catalogue.h"

namespace gemmd {

CpuDevice::CpuDevice(int index) {
  description_.index = index;
  description_.kind = "cpu";
  description_.threads = CpuGemmThreads();
  description_.name =
      absl::StrCat("cpu:", index, " (OpenBLAS, ", description_.threads, " threads)");
}

absl::Status CpuDevice::Run(const DeviceLaunch& launch, int /*lane*/, LaunchTimes* times) {
  const auto* kernel = dynamic_cast<const CpuKernel*>(launch.kernel);
  if (kernel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ",
        launch.kernel == nullptr ? std::string("(none)") : std::string(launch.kernel->name()),
        " is not a CPU kernel"));
  }
  const absl::Time start = absl::Now();
  absl::Status status = absl::OkStatus();
  for (const LaunchItem& item : launch.items) {
    status = item.quantized != nullptr
                 ? kernel->Run(*item.quantized, static_cast<float*>(item.host.c_out))
                 : kernel->Run(item.problem, item.host);
    if (!status.ok()) break;
  }
  times->copy_in = absl::ZeroDuration();
  times->compute = absl::Now() - start;
  times->copy_out = absl::ZeroDuration();
  return status;
}

Backend OpenCpuBackend(int devices) {
  Backend cpu;
  cpu.name = "cpu";
  cpu.catalogue = std::make_unique<CpuCatalogue>();
  for (int d = 0; d < devices; ++d) cpu.devices.push_back(std::make_unique<CpuDevice>(d));
  return cpu;
}

}  // namespace gemmd
