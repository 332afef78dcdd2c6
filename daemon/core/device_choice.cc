#include "daemon/core/device_choice.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardd::core {

absl::StatusOr<DeviceChoice> ResolveDevice(absl::string_view requested,
                                           const DeviceInventory& inventory,
                                           const DeviceSupport& support) {
  const bool usable =
      inventory.cuda_compiled && inventory.cuda_device_count > 0;
  if (requested == "cpu") {
    return DeviceChoice{DeviceKind::kCpu, -1, "cpu: requested"};
  }
  if (requested == "auto") {
    if (usable && !support.cuda) {
      return DeviceChoice{
          DeviceKind::kCpu, -1,
          absl::StrCat("auto: ", inventory.cuda_device_count,
                       " CUDA device(s) usable, but ",
                       support.cuda_missing_reason, "; using CPU")};
    }
    if (usable) {
      return DeviceChoice{DeviceKind::kCuda, 0,
                          absl::StrCat("auto: ", inventory.cuda_device_count,
                                       " CUDA device(s); using cuda:0")};
    }
    const std::string why =
        !inventory.cuda_compiled
            ? std::string("built without CUDA")
            : absl::StrCat("no usable CUDA device (",
                           inventory.cuda_unavailable_reason, ")");
    return DeviceChoice{DeviceKind::kCpu, -1,
                        absl::StrCat("auto: ", why, "; using CPU")};
  }
  if (absl::StartsWith(requested, "cuda:")) {
    int64_t index = -1;
    if (!absl::SimpleAtoi(requested.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device: malformed \"", requested,
                       "\" (expected cpu, cuda:N or auto)"));
    }
    if (!inventory.cuda_compiled) {
      return absl::FailedPreconditionError(
          absl::StrCat("device: ", requested,
                       " requested, but this binary was built without CUDA "
                       "(rebuild with --config=cuda)"));
    }
    if (index >= inventory.cuda_device_count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device: ", requested, " requested, but ",
          inventory.cuda_device_count, " CUDA device(s) are usable",
          inventory.cuda_unavailable_reason.empty()
              ? ""
              : absl::StrCat(" (", inventory.cuda_unavailable_reason, ")")));
    }
    if (!support.cuda) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device: ", requested, " requested, but ",
          support.cuda_missing_reason, " (use --device=cpu, or auto)"));
    }
    return DeviceChoice{DeviceKind::kCuda, index,
                        absl::StrCat(requested, ": requested")};
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "device: malformed \"", requested, "\" (expected cpu, cuda:N or auto)"));
}

}  // namespace shardd::core
