// CUDA device discovery: the first piece of the CUDA backend. Compiled only when the toolkit is
// found (FUSEC_HAVE_CUDA); callers guard on that macro.
#pragma once
#include <string>
#include <vector>

namespace fusec::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  size_t total_memory = 0;
  int multiprocessors = 0;
};

/// Devices the CUDA runtime sees. Empty (not an error) when there is no GPU or driver; `why`
/// then says what the runtime reported.
std::vector<DeviceInfo> list_devices(std::string* why = nullptr);

}  // namespace fusec::cuda
