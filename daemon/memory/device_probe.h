#ifndef SHARDD_DAEMON_MEMORY_DEVICE_PROBE_H_
#define SHARDD_DAEMON_MEMORY_DEVICE_PROBE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/core/device_choice.h"

namespace shardd::memory {

// Library versions found at run time, for logs and status.
struct RuntimeVersions {
  int cuda_runtime = 0;  // e.g. 13000; 0 when built without CUDA.
  int cuda_driver = 0;   // 0 when no driver is installed.
  int nccl = 0;          // e.g. 22800; 0 when built without CUDA.
};

// Asks the CUDA runtime which devices are usable. Built without
// --config=cuda it reports none. A missing or too old driver (no GPU on
// the machine) is reported as zero devices with the runtime's reason, never
// as an error: the daemon then runs on the CPU. Thread-safe.
core::DeviceInventory ProbeDevices();

RuntimeVersions ProbeRuntimeVersions();

// Free and total memory of one CUDA device (cudaMemGetInfo), for admission.
struct DeviceMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// Asks the CUDA runtime about `device` (making it the calling thread's
// current device). Built without --config=cuda: FAILED_PRECONDITION; a CUDA
// error: INTERNAL with the runtime's reason.
absl::StatusOr<DeviceMemoryInfo> ProbeDeviceMemory(int device);

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_DEVICE_PROBE_H_
