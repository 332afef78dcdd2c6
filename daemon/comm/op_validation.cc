#include "daemon/comm/op_validation.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace shardd::comm {
namespace {

// Byte counts of any dtype stay in range below this many elements.
constexpr int64_t kMaxElements = INT64_MAX / 4;

absl::Status ValidateReduceOp(ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    return absl::InvalidArgumentError("op is not sum or average");
  }
  return absl::OkStatus();
}

absl::Status ValidateCount(int64_t count) {
  if (count < 0 || count > kMaxElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("count is ", count, ", must be >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCounts(const std::vector<int64_t>& counts, int size,
                            int64_t* total) {
  if (static_cast<int>(counts.size()) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts has ", counts.size(),
                     " entries but the group has ", size, " ranks"));
  }
  int64_t sum = 0;
  for (int i = 0; i < size; ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("counts[", i, "] is ", counts[i], ", must be >= 0"));
    }
    if (counts[i] > kMaxElements - sum) {
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

absl::Status ValidateAllGather(const void* input, const void* output,
                               const std::vector<int64_t>& counts,
                               core::DType dtype, const OpOptions& options,
                               int rank, int size, int64_t* total) {
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (status.ok()) status = ValidateCounts(counts, size, total);
  if (!status.ok()) return status;
  if (input == nullptr && counts[rank] > 0) {
    return absl::InvalidArgumentError(
        "input is null but this rank's count is > 0");
  }
  if (output == nullptr && *total > 0) {
    return absl::InvalidArgumentError(
        "output is null but the counts sum to > 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateReduceScatter(const void* input, const void* output,
                                   const std::vector<int64_t>& counts,
                                   core::DType dtype, ReduceOp op,
                                   const OpOptions& options, int rank, int size,
                                   int64_t* total) {
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (status.ok()) status = ValidateCounts(counts, size, total);
  if (status.ok()) status = ValidateReduceOp(op);
  if (!status.ok()) return status;
  if (input == nullptr && *total > 0) {
    return absl::InvalidArgumentError(
        "input is null but the counts sum to > 0");
  }
  if (output == nullptr && counts[rank] > 0) {
    return absl::InvalidArgumentError(
        "output is null but this rank's count is > 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateAllReduce(const void* buffer, int64_t count,
                               core::DType dtype, ReduceOp op,
                               const OpOptions& options) {
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (status.ok()) status = ValidateCount(count);
  if (status.ok()) status = ValidateReduceOp(op);
  if (!status.ok()) return status;
  if (buffer == nullptr && count > 0) {
    return absl::InvalidArgumentError("buffer is null but count > 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateBroadcast(const void* buffer, int64_t count,
                               core::DType dtype, int root, int size,
                               const OpOptions& options) {
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (status.ok()) status = ValidateCount(count);
  if (!status.ok()) return status;
  if (root < 0 || root >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is outside [0, ", size, ")"));
  }
  if (buffer == nullptr && count > 0) {
    return absl::InvalidArgumentError("buffer is null but count > 0");
  }
  return absl::OkStatus();
}

absl::Status ValidatePointToPoint(const void* buffer, int64_t bytes, int peer,
                                  int rank, int size,
                                  const OpOptions& options) {
  if (absl::Status status = ValidateTimeout(options); !status.ok()) {
    return status;
  }
  if (peer < 0 || peer >= size || peer == rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is not another rank of [0, ", size, ")"));
  }
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes is ", bytes, ", must be >= 0"));
  }
  if (buffer == nullptr && bytes > 0) {
    return absl::InvalidArgumentError("buffer is null but bytes > 0");
  }
  return absl::OkStatus();
}

}  // namespace shardd::comm
