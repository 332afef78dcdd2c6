#ifndef SHARDD_DAEMON_COMM_OP_VALIDATION_H_
#define SHARDD_DAEMON_COMM_OP_VALIDATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/comm/collective.h"
#include "daemon/core/dtype.h"

namespace shardd::comm {

// Argument checks a host communicator makes before queueing an operation
// (QueuedCollective), so that every host transport refuses the same things
// with the same INVALID_ARGUMENT, naming what is wrong, before anything is
// sent. Pure functions. `rank` and `size` are the caller's place in its
// group.

// A count vector for a group of `size` ranks; on success sets `total`.
absl::Status ValidateCounts(const std::vector<int64_t>& counts, int size,
                            int64_t* total);
absl::Status ValidateDType(core::DType dtype);
absl::Status ValidateTimeout(const OpOptions& options);

// Collective::AllGather's and ReduceScatter's arguments; on success sets
// `total` to Σ counts.
absl::Status ValidateAllGather(const void* input, const void* output,
                               const std::vector<int64_t>& counts,
                               core::DType dtype, const OpOptions& options,
                               int rank, int size, int64_t* total);
absl::Status ValidateReduceScatter(const void* input, const void* output,
                                   const std::vector<int64_t>& counts,
                                   core::DType dtype, ReduceOp op,
                                   const OpOptions& options, int rank, int size,
                                   int64_t* total);
absl::Status ValidateAllReduce(const void* buffer, int64_t count,
                               core::DType dtype, ReduceOp op,
                               const OpOptions& options);
absl::Status ValidateBroadcast(const void* buffer, int64_t count,
                               core::DType dtype, int root, int size,
                               const OpOptions& options);
// Send's and Recv's: `peer` must be another rank of the group.
absl::Status ValidatePointToPoint(const void* buffer, int64_t bytes, int peer,
                                  int rank, int size, const OpOptions& options);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_OP_VALIDATION_H_
