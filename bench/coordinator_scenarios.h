#ifndef SHARDD_BENCH_COORDINATOR_SCENARIOS_H_
#define SHARDD_BENCH_COORDINATOR_SCENARIOS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/coordinator_process.h"
#include "bench/simulated_members.h"

namespace shardd::bench {

// The scenarios of bench/coordinator_sim, each a function over one job: a
// real coordinator process and W simulated members (SimulatedMembers) on
// 127.0.0.1. Every wait has a deadline; a scenario that runs out of time
// says how far it got instead of failing the run.

struct SimConfig {
  std::string coordinator_binary;
  int world_size = 16;
  // F; must divide W. W / F >= 2, so that a lost shard has a replica.
  int sharding_factor = 8;
  int64_t lease_ms = 1500;
  int64_t heartbeat_interval_ms = 500;
  int members_per_channel = 8;
  int harness_threads = 2;
  // SimulatedMembersOptions::scoped_watch.
  bool scoped_watch = true;
  // The coordinator's stderr (its decisions); empty: /dev/null.
  std::string coordinator_log;
};

// A coordinator process and its simulated members (none joined yet).
struct SimJob {
  SimConfig config;
  std::unique_ptr<CoordinatorProcess> coordinator;
  std::unique_ptr<SimulatedMembers> members;
};

absl::StatusOr<SimJob> StartJob(const SimConfig& config);

// CPU seconds used over a scenario: the coordinator's (/proc/PID/stat) and
// the harness process's own (getrusage), separately.
struct CpuUse {
  double coordinator_s = 0;
  double harness_s = 0;
};

// join_to_ready: all W members Join at once; each reports READY for the
// first epoch whose plan it sees issued.
struct FormResult {
  bool formed = false;
  // From the first Join to a member seeing the epoch ready, and to every
  // member having seen it.
  double seconds = -1;
  double all_seen_seconds = -1;
  // Progress (also when it did not form): the ready epoch (else the highest
  // seen), members holding a lease, members listed in the newest update.
  int64_t epoch = 0;
  int64_t joined = 0;
  int64_t members_listed = 0;
  CpuUse cpu;
  // Non-keepalive watch updates received by all members, and their bytes.
  int64_t change_updates = 0;
  int64_t change_bytes = 0;
  // Leases that ran out meanwhile (the member joined again), and the
  // slowest heartbeat reply since the job started.
  int64_t rejoins = 0;
  double heartbeat_max_seconds = 0;
};
FormResult JoinToReady(SimJob& job, absl::Duration timeout);

// failure_to_ready: a hot spare watches; one member crashes (no more
// heartbeats, its calls cancelled); the spare joins the slot once its watch
// shows it empty (after the coordinator's lease expiry); until a member sees
// the epoch with the replacement ready (the shard copy left out).
struct FailureResult {
  bool recovered = false;
  double detection_seconds = -1;  // crash -> the spare saw the slot empty
  double joined_seconds = -1;     // crash -> the spare's Join answered
  double seconds = -1;            // crash -> a member saw the epoch ready
  double all_seen_seconds = -1;   // crash -> every member saw it ready
  int64_t epochs = 0;             // epochs from the crash to ready
  int64_t epoch = 0;              // the ready epoch (or the highest seen)
  CpuUse cpu;
  int64_t change_updates = 0;
  int64_t change_bytes = 0;
  // change_bytes / (watchers * epochs): what one membership change costs
  // one member in watch traffic.
  double bytes_per_member_per_change = -1;
  double updates_per_member_per_change = -1;
  int64_t rejoins = 0;
};
FailureResult FailureToReady(SimJob& job, int victim_rank,
                             absl::Duration timeout);

// steady heartbeats: a ready job left alone for `window`.
struct SteadyResult {
  double seconds = 0;
  int64_t heartbeats = 0;
  CpuUse cpu;
  double coordinator_cpu_per_heartbeat = -1;
  // The coordinator's share of one core while idle (heartbeats and the
  // watch keepalives, which carry the whole membership).
  double coordinator_cores = 0;
  int64_t keepalive_bytes = 0;
  int64_t change_updates = 0;
};
SteadyResult SteadyHeartbeats(SimJob& job, absl::Duration window);

// heartbeat capacity: HeartbeatLoad with `threads` x `in_flight` calls on
// top of the members' own heartbeats, for `duration`.
struct CapacityResult {
  double seconds = 0;
  int64_t load_ok = 0;
  int64_t load_failed = 0;
  int64_t member_heartbeats = 0;
  // (load_ok + member_heartbeats) / seconds.
  double per_second = 0;
  CpuUse cpu;
  double coordinator_cpu_per_heartbeat = -1;
  double coordinator_cores = 0;
};
CapacityResult HeartbeatCapacity(SimJob& job, int threads, int in_flight,
                                 absl::Duration duration);

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_COORDINATOR_SCENARIOS_H_
