// How a Memory::kDevice bucket's data reaches the exchange, and the state a
// bucket slot keeps on its device (BucketSlot::device). The device work
// itself is the device floor's (device/device.h); the bucket pipeline chooses
// the path per bucket and step (bucket_pipeline_device.cc).
#ifndef GRADEX_PIPELINE_DEVICE_PATH_H_
#define GRADEX_PIPELINE_DEVICE_PATH_H_

#include <memory>

#include "device/device.h"

namespace gradex::pipeline {

// kHost: host memory as given. kWholeBucketStaging: a device bucket copied
// whole to pinned host memory and back (its slot's residual stays on the
// device where it lives there: a dense probe or fallback stages the
// accumulated residual down and leaves the slot resident).
// kDeviceSelection: the bucket's residual and velocity live on its GPU, the
// local part runs there and only the selected entries and the result's COO
// cross PCIe.
enum class DevicePath { kHost, kWholeBucketStaging, kDeviceSelection };
// "host", "whole-bucket staging", "device selection" (stats() and the log).
const char* DevicePathName(DevicePath path);

// A bucket slot's state on its device: while a slot holds one, these are its
// residual and velocity (empty without momentum) and the slot's host vectors
// are stale. `last` is the point of its last use on a queue; the next queue
// to touch the buffers waits for it (the pipeline's two queues are not
// ordered with each other).
struct DeviceResiduals {
  std::unique_ptr<device::Buffer> residual;
  std::unique_ptr<device::Buffer> velocity;
  std::shared_ptr<device::Event> last;
};

}  // namespace gradex::pipeline

#endif  // GRADEX_PIPELINE_DEVICE_PATH_H_
