#include "daemon/comm/op_validation.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace shardd::comm {

// Validates a count vector against the group; on success sets `total`.
absl::Status ValidateCounts(const std::vector<int64_t>& counts, int size,
                            int64_t* total) {
  if (static_cast<int>(counts.size()) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts has ", counts.size(),
                     " entries but the group has ", size, " ranks"));
  }
  int64_t sum = 0;
  const int64_t limit = INT64_MAX / 4;  // Byte counts stay in range.
  for (int i = 0; i < size; ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("counts[", i, "] is ", counts[i], ", must be >= 0"));
    }
    if (counts[i] > limit - sum) {
      return absl::InvalidArgumentError("sum of counts overflows");
    }
    sum += counts[i];
  }
  *total = sum;
  return absl::OkStatus();
}

absl::Status ValidateDType(core::DType dtype) {
  if (!core::IsValidDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype ", static_cast<int>(dtype), " is not a supported element type"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTimeout(const OpOptions& options) {
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.timeout must be >= 0 (0 = default), got ",
                     absl::FormatDuration(options.timeout)));
  }
  return absl::OkStatus();
}

}  // namespace shardd::comm
