#include "bench/coordinator_scenarios.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

#include "bench/heartbeat_load.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/mono_time.h"

namespace shardd::bench {
namespace {

double HarnessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Both processes' CPU time now.
CpuUse ReadCpu(const SimJob& job) {
  CpuUse c;
  c.coordinator_s = job.coordinator->CpuSeconds().value_or(0);
  c.harness_s = HarnessCpuSeconds();
  return c;
}

CpuUse Since(const CpuUse& before, const SimJob& job) {
  CpuUse now = ReadCpu(job);
  now.coordinator_s -= before.coordinator_s;
  now.harness_s -= before.harness_s;
  return now;
}

double Seconds(MonoTime from, MonoTime to) {
  if (to == MonoTime::InfiniteFuture() || to == MonoTime::InfinitePast()) {
    return -1;
  }
  return absl::ToDoubleSeconds(to - from);
}

}  // namespace

absl::StatusOr<SimJob> StartJob(const SimConfig& config) {
  SimJob job;
  job.config = config;
  CoordinatorProcessOptions o;
  o.binary = config.coordinator_binary;
  o.world_size = config.world_size;
  o.sharding_factor = config.sharding_factor;
  o.lease_ms = config.lease_ms;
  o.heartbeat_interval_ms = config.heartbeat_interval_ms;
  o.log_path = config.coordinator_log;
  absl::StatusOr<std::unique_ptr<CoordinatorProcess>> c =
      CoordinatorProcess::Start(o);
  if (!c.ok()) return c.status();
  job.coordinator = *std::move(c);
  SimulatedMembersOptions m;
  m.address = job.coordinator->address();
  m.members_per_channel = config.members_per_channel;
  m.threads = config.harness_threads;
  m.scoped_watch = config.scoped_watch;
  job.members = std::make_unique<SimulatedMembers>(m);
  return job;
}

FormResult JoinToReady(SimJob& job, absl::Duration timeout) {
  const int w = job.config.world_size;
  const CpuUse cpu = ReadCpu(job);
  const FleetCounters before = job.members->Counters();
  const MonoTime start = MonoNow();
  const MonoTime deadline = start + timeout;
  job.members->JoinRanks(0, w);
  FormResult r;
  const MonoTime ready = job.members->AwaitReadySeen(1, deadline);
  // Costs up to the moment the job formed (or the timeout).
  r.cpu = Since(cpu, job);
  const FleetCounters c = job.members->Counters();
  r.formed = ready != MonoTime::InfiniteFuture();
  r.seconds = Seconds(start, ready);
  if (r.formed) {
    r.all_seen_seconds =
        Seconds(start, job.members->AwaitReadySeenBy(1, w, deadline));
  }
  r.epoch = r.formed ? c.ready_epoch : c.max_epoch;
  r.joined = c.live;
  r.members_listed = c.members_listed;
  r.change_updates = c.change_updates - before.change_updates;
  r.change_bytes = c.change_bytes - before.change_bytes;
  r.rejoins = c.rejoins - before.rejoins;
  r.heartbeat_max_seconds = c.heartbeat_max_seconds;
  return r;
}

FailureResult FailureToReady(SimJob& job, int victim_rank,
                             absl::Duration timeout) {
  FailureResult r;
  const int w = job.config.world_size;
  const int victim = job.members->LiveMemberOf(victim_rank);
  if (victim < 0) return r;
  MonoTime deadline = MonoNow() + timeout;
  // The spare watches before the crash, as a standby would.
  const int spare = job.members->AddReplacement(victim_rank);
  job.members->AwaitWatching(spare, deadline);
  const FleetCounters before = job.members->Counters();
  const CpuUse cpu = ReadCpu(job);
  const MonoTime crashed = MonoNow();
  deadline = crashed + timeout;
  job.members->Crash(victim);
  const MemberStatus joined = job.members->AwaitJoined(spare, deadline);
  r.detection_seconds = Seconds(crashed, joined.saw_slot_empty_at);
  if (joined.live) {
    r.joined_seconds = Seconds(crashed, joined.joined_at);
    const MonoTime ready =
        job.members->AwaitReadySeen(joined.join_epoch, deadline);
    r.recovered = ready != MonoTime::InfiniteFuture();
    r.seconds = Seconds(crashed, ready);
  }
  // Costs and traffic up to the moment the epoch was ready (or the
  // timeout), not what follows while the last members catch up.
  r.cpu = Since(cpu, job);
  const FleetCounters c = job.members->Counters();
  if (r.recovered) {
    r.all_seen_seconds = Seconds(
        crashed, job.members->AwaitReadySeenBy(joined.join_epoch, w, deadline));
  }
  r.epoch = r.recovered ? c.ready_epoch : c.max_epoch;
  r.epochs = r.epoch - before.ready_epoch;
  r.change_updates = c.change_updates - before.change_updates;
  r.change_bytes = c.change_bytes - before.change_bytes;
  r.rejoins = c.rejoins - before.rejoins;
  if (r.epochs > 0) {
    // W watchers: the W - 1 survivors and the spare.
    const double per = static_cast<double>(w) * static_cast<double>(r.epochs);
    r.bytes_per_member_per_change = static_cast<double>(r.change_bytes) / per;
    r.updates_per_member_per_change =
        static_cast<double>(r.change_updates) / per;
  }
  return r;
}

SteadyResult SteadyHeartbeats(SimJob& job, absl::Duration window) {
  SteadyResult r;
  const FleetCounters before = job.members->Counters();
  const CpuUse cpu = ReadCpu(job);
  const MonoTime start = MonoNow();
  // A measurement window, not a synchronisation: the job runs meanwhile.
  SleepUntil(start + window);
  r.cpu = Since(cpu, job);
  r.seconds = absl::ToDoubleSeconds(MonoNow() - start);
  const FleetCounters c = job.members->Counters();
  r.heartbeats = c.heartbeats_ok - before.heartbeats_ok;
  r.keepalive_bytes = c.keepalive_bytes - before.keepalive_bytes;
  r.change_updates = c.change_updates - before.change_updates;
  if (r.heartbeats > 0) {
    r.coordinator_cpu_per_heartbeat =
        r.cpu.coordinator_s / static_cast<double>(r.heartbeats);
  }
  r.coordinator_cores = r.cpu.coordinator_s / r.seconds;
  return r;
}

CapacityResult HeartbeatCapacity(SimJob& job, int threads, int in_flight,
                                 absl::Duration duration) {
  CapacityResult r;
  HeartbeatLoadOptions o;
  o.address = job.coordinator->address();
  o.threads = threads;
  o.in_flight = in_flight;
  o.duration = duration;
  const std::vector<MemberLease> leases = job.members->Leases();
  const FleetCounters before = job.members->Counters();
  const CpuUse cpu = ReadCpu(job);
  const HeartbeatLoadResult load = HeartbeatLoad::Run(o, leases);
  r.cpu = Since(cpu, job);
  r.seconds = load.seconds;
  r.load_ok = load.ok;
  r.load_failed = load.failed;
  r.member_heartbeats =
      job.members->Counters().heartbeats_ok - before.heartbeats_ok;
  const int64_t total = r.load_ok + r.member_heartbeats;
  if (r.seconds > 0) {
    r.per_second = static_cast<double>(total) / r.seconds;
    r.coordinator_cores = r.cpu.coordinator_s / r.seconds;
  }
  if (total > 0) {
    r.coordinator_cpu_per_heartbeat =
        r.cpu.coordinator_s / static_cast<double>(total);
  }
  return r;
}

}  // namespace shardd::bench
