#include "daemon/node/engine_math.h"

#include <algorithm>
#include <vector>

namespace shardd::node {

absl::Status ReadEngineMemory(
    EngineMath& math, const uint8_t* src, int64_t bytes,
    const std::function<absl::Status(const uint8_t* host, int64_t n)>& fn) {
  if (bytes <= 0) return absl::OkStatus();
  if (!math.device_memory()) return fn(src, bytes);
  constexpr int64_t kBounce = int64_t{4} << 20;
  std::vector<uint8_t> bounce(static_cast<size_t>(std::min(bytes, kBounce)));
  for (int64_t done = 0; done < bytes; done += kBounce) {
    const int64_t n = std::min(kBounce, bytes - done);
    if (absl::Status s = math.Download(bounce.data(), src + done, n); !s.ok()) {
      return s;
    }
    if (absl::Status s = fn(bounce.data(), n); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace shardd::node
