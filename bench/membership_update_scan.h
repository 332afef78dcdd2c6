#ifndef SHARDD_BENCH_MEMBERSHIP_UPDATE_SCAN_H_
#define SHARDD_BENCH_MEMBERSHIP_UPDATE_SCAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::bench {

// What a simulated member needs from one serialized MembershipUpdate.
struct ScannedUpdate {
  int64_t epoch = 0;
  bool ready = false;
  bool keepalive = false;
  bool job_failed = false;
  int32_t world_size = 0;
  // The ranks of the members listed, in wire order.
  std::vector<int32_t> ranks;
  // A scoped stream's delta (MembershipUpdate.delta): `ranks` joined or
  // were replaced, removed_ranks became empty; live_members counts all W.
  bool delta = false;
  std::vector<int32_t> removed_ranks;
  int32_t live_members = 0;
  // The current epoch's plan (parsed in full: it is small).
  shardd::v1::RecoveryPlan plan;
  // The serialized size of the whole update.
  size_t bytes = 0;
};

// Reads a serialized shardd.v1.MembershipUpdate without parsing every
// MemberInfo: of each member only its rank (field 1, which the serializer
// writes first) is read and the rest skipped. With W members per update and
// W watchers in one harness process, a full parse would make the harness,
// not the coordinator, the bottleneck at W = 4,096.
//
// Stateless; the functions are thread-safe.
class MembershipUpdateScan {
 public:
  // INVALID_ARGUMENT when the bytes are not a well-formed MembershipUpdate.
  static absl::StatusOr<ScannedUpdate> Scan(const grpc::ByteBuffer& buffer);
  static absl::StatusOr<ScannedUpdate> Scan(const std::string& bytes);
};

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_MEMBERSHIP_UPDATE_SCAN_H_
