#ifndef SHARDD_DAEMON_COMM_OP_VALIDATION_H_
#define SHARDD_DAEMON_COMM_OP_VALIDATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/comm/collective.h"
#include "daemon/core/dtype.h"

namespace shardd::comm {

// Argument checks every host backend makes before queueing an operation,
// so that they refuse the same things with the same INVALID_ARGUMENT.

// A count vector for a group of `size` ranks; on success sets `total`.
absl::Status ValidateCounts(const std::vector<int64_t>& counts, int size,
                            int64_t* total);
absl::Status ValidateDType(core::DType dtype);
absl::Status ValidateTimeout(const OpOptions& options);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_OP_VALIDATION_H_
