#ifndef SHARDD_DAEMON_COORDINATOR_COORDINATOR_PROTO_H_
#define SHARDD_DAEMON_COORDINATOR_COORDINATOR_PROTO_H_

#include <cstdint>

#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/epoch_plan.h"
#include "daemon/coordinator/membership_table.h"
#include "daemon/core/mono_time.h"
#include "shardd/v1/coordinator.pb.h"

// Conversions from the coordinator's values (membership_table.h,
// coordinator_manager.h) to shardd.v1 messages, shared by the gRPC service
// and the watch-stream builders. Pure functions.

namespace shardd::coordinator {

// Unix milliseconds; 0 for an infinite time.
int64_t UnixMs(absl::Time t);
// A monotonic time of the snapshot's as wall-clock milliseconds, for people.
int64_t UnixMs(const ClusterSnapshot& s, MonoTime t);

shardd::v1::MemberState ToProto(MemberPhase phase);
shardd::v1::DecisionKind ToProto(DecisionKind kind);
shardd::v1::EpochPlanKind ToProto(PlanKind kind);

void FillMember(const ClusterSnapshot& snap, const SlotRecord& s,
                shardd::v1::MemberInfo* m);
// W, F, rank and its groups, by the daemons' placement rule.
void FillTopology(int world_size, int sharding_factor, int rank,
                  shardd::v1::Topology* t);
// The snapshot's current plan.
void FillPlan(const ClusterSnapshot& s, shardd::v1::RecoveryPlan* out);
// A full MembershipUpdate: every live member of the snapshot.
void FillUpdate(const ClusterSnapshot& s, bool keepalive,
                shardd::v1::MembershipUpdate* u);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_COORDINATOR_PROTO_H_
