// A randomized property test of MembershipTable (and DecideEpochPlan behind
// it) over a simulated cluster: daemons are plain structs, the coordinator
// is a MembershipTable, time is an MonoTime the simulation advances. No
// sleeps, threads or sockets: thousands of fault sequences run in seconds.
//
// Each run draws a sequence of events from one seed: SIGKILL of a daemon
// (its state is gone; a replacement with a new incarnation and no shard
// joins the same rank after a delay, with the rank's checkpoint store as its
// inventory), two kills at once (often both holders of one shard), SIGSTOP
// for a while (on SIGCONT a NOT_FOUND heartbeat makes it re-join holding its
// shard), coordinator restarts (a fresh table; every daemon re-joins with
// what it holds, in random order), failure reports without a suspect,
// training steps (some interrupted: a daemon stopped during the vote holds
// the step in doubt; a coordinator crashing during the vote leaves some
// daemons with the step applied and the others in doubt), and time passing
// (heartbeats every lease/3, ExpireLeases every tick). Daemons follow the
// table's plan: RESUME copy targets take a live source's shard, in-doubt
// holders apply a committed pending step, ROLLBACK restores the checkpoint,
// then each reports READY with its step.
//
// Ground truth (what the simulator knows and the table may not):
//  - J, the job's step: the highest step a daemon applied. It goes down
//    only when a daemon restores a checkpoint as a ROLLBACK plan (checked
//    below) tells it, or when a commit is forgotten: no running or stopped
//    daemon applied it and the current table never learned it (a
//    coordinator restart after every daemon that applied it died); J is
//    then the highest step the table, a holder or a checkpoint on disk
//    knows, and the daemons holding it in doubt discard it. (Likewise,
//    without checkpoints, a restarted coordinator that no holder ever joins
//    sees a new job: J = 0.)
//  - A daemon holding step s with s + 1 in doubt, s + 1 <= J, is "at"
//    s + 1 as well: it applies the committed step at the next epoch.
//  - The job is recoverable when J = 0, or every shard index has a holder
//    at J among the counted processes, or some step is held by every rank
//    (a verified checkpoint in the rank's store, which survives its
//    daemons, or a counted holder at that step).
//  - Counted processes: "strict" counts every process that still exists
//    (running or SIGSTOPped); "lenient" drops a SIGSTOPped process once the
//    table has waited rejoin_grace for it (from its removal, or from the
//    table's first join if it never joined this table): by design a hung
//    holder that stays away longer than the grace is given up. A ROLLBACK
//    plan is judged as the table can see it: a killed daemon whose lease
//    still runs counts with what it held.
//
// Invariants, checked after every table call, event and tick:
//  1. table.ready() implies every existing slot member is at the same step
//     (an in-doubt step the table committed counts as applied), that step is
//     table.committed_step(), and it is J.
//  2. EPOCH_STALLED never happens while the simulator made fewer than
//     max_failed_epochs epochs fail (failure reports, refused READYs) since
//     the last ready epoch (normal runs stay below); a report storm (a ready
//     job, then max_failed_epochs + 1 reports with the same members) fails
//     the job after exactly the last one.
//  3. table.failed() implies the job is not lenient-recoverable. A job that
//     is not strict-recoverable fails: at once when every slot is claimed
//     by its running daemon; without checkpoints, one tick after the grace
//     that follows the table's first join and its last removal (once the
//     table knows J and no killed holder's lease still runs); in any case
//     within max stop + max replacement delay + lease + grace (+ ticks) of
//     the later of the loss and the last fault. Plans: RESUME is at J;
//     ROLLBACK goes to the highest step every rank holds, and below J only
//     when a shard has no holder at J; NEW only when J = 0 and no step is
//     checkpointed by every rank; no daemon is told to keep a shard it does
//     not hold or to restore a checkpoint it does not have.
//  4. Once failed, the table stays failed and Join, Heartbeat and
//     ReportFailure return DATA_LOSS.
//  5. After the faults stop, a job that did not fail becomes ready within
//     a bounded simulated time, and trains.
//
// Replay: every failure prints its seed and event log; SHARDD_SIM_SEED=<seed>
// (or --seed=<seed>) with the test's --gtest_filter replays it (one run);
// SHARDD_SIM_RUNS sets the number of runs. With bazel: bazel test
// //daemon/coordinator:membership_simulation_test
// --test_env=SHARDD_SIM_SEED=<seed>
// --test_arg=--gtest_filter=MembershipSimulationTest.<Test>
//
// Findings it made, fixed in epoch_plan (each case is a unit test there):
//  - a table that no holder joins (every daemon and the coordinator
//    restarted) planned NEW at step 0 although the ranks held verified
//    checkpoints; checkpoints now prove their step, and a rollback removes
//    the files above the step it goes back to (so stale ones never do);
//  - a ROLLBACK ignored a member's committed in-doubt step (it rolled back
//    further than needed, or failed a recoverable job);
//  - with no live member at all, the plan became FAILED without any
//    inventory to decide from; it now waits.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "daemon/coordinator/epoch_plan.h"
#include "daemon/coordinator/membership_table.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

const MonoTime kT0 = MonoTime::FromOrigin(absl::Seconds(2'000'000));
const absl::Duration kLease = absl::Milliseconds(1500);
const absl::Duration kHeartbeat = kLease / 3;
// The coordinator's housekeeping (ExpireLeases, which settles) runs every
// tick; daemons react to a new plan within a few ticks.
const absl::Duration kTick = absl::Milliseconds(50);
const absl::Duration kMaxReplaceDelay = absl::Seconds(4);
const absl::Duration kMaxStop = absl::Seconds(5);
const absl::Duration kMaxRejoinDelay = kLease / 2;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Scenario {
  int world_size = 4;
  int sharding_factor = 2;
  // Every checkpoint_every committed steps each holder writes a checkpoint
  // of that step to its rank's store (which survives the daemon), keeping
  // the last 2.
  bool checkpoints = false;
  int checkpoint_every = 3;
  int events = 60;
  int runs = 2000;
  // Also draw whole-cluster outages (every daemon killed, the coordinator
  // restarted).
  bool outages = false;
};

enum class Proc { kAlive, kStopped, kDead };

const char* ProcName(Proc p) {
  switch (p) {
    case Proc::kAlive:
      return "alive";
    case Proc::kStopped:
      return "stopped";
    case Proc::kDead:
      return "dead";
  }
  return "?";
}

// One daemon process.
struct Daemon {
  std::string identity;
  std::string incarnation;
  Proc state = Proc::kAlive;
  bool holds = false;
  int64_t step = 0;
  int64_t pending = 0;  // In-doubt step (0: none).
  // The lease token of its latest join ("": never joined). After a
  // coordinator restart it is stale: the next heartbeat gets NOT_FOUND.
  std::string token;
  int64_t last_epoch = 0;    // Newest epoch heard of.
  int64_t ready_epoch = -1;  // Epoch of the current table it is READY for.
  MonoTime next_heartbeat = MonoTime::InfinitePast();
  MonoTime resume_at = MonoTime::InfiniteFuture();  // While stopped.
  // After a coordinator restart: when it notices (heartbeat, NOT_FOUND,
  // re-join).
  MonoTime rejoin_at = MonoTime::InfiniteFuture();
  // When the current table removed it (lease expired).
  MonoTime removed_at = MonoTime::InfiniteFuture();
};

struct RankState {
  Daemon proc;  // The current process (dead: a replacement is coming).
  std::vector<int64_t> store;  // Verified checkpoint steps, ascending.
  int incarnations = 0;
  MonoTime replace_at = MonoTime::InfiniteFuture();
};

// Which processes count as holders (see the file comment).
enum class View {
  kStrict,   // Every process that exists (running or stopped).
  kLenient,  // Less the stopped ones the table has given up on.
  // As the table may see it: kStrict, and a killed process whose lease has
  // not run out yet, with what it held.
  kTable,
};

struct Judgement {
  bool recoverable = true;
  std::string why;
};

struct Stats {
  int64_t runs = 0;
  int64_t events = 0;
  int64_t steps = 0;
  int64_t ready_epochs = 0;
  int64_t rollbacks = 0;
  int64_t forgotten = 0;
  int64_t unrecoverable = 0;
  int64_t stalled = 0;
  int64_t kills = 0;
  int64_t stops = 0;
  int64_t restarts = 0;
  int64_t in_doubt = 0;
  int64_t wrong_ready = 0;
  int64_t simulated_ms = 0;
  int64_t plans_checked = 0;

  void Add(const Stats& o) {
    runs += o.runs;
    events += o.events;
    steps += o.steps;
    ready_epochs += o.ready_epochs;
    rollbacks += o.rollbacks;
    forgotten += o.forgotten;
    unrecoverable += o.unrecoverable;
    stalled += o.stalled;
    kills += o.kills;
    stops += o.stops;
    restarts += o.restarts;
    in_doubt += o.in_doubt;
    wrong_ready += o.wrong_ready;
    simulated_ms += o.simulated_ms;
    plans_checked += o.plans_checked;
  }
};

class Simulation {
 public:
  Simulation(const Scenario& scenario, uint64_t seed)
      : sc_(scenario), rng_(SplitMix64(seed)) {}

  // Empty when every invariant held, else the first violation.
  std::string Run();
  // The options, the event log and the table's last decisions.
  std::string Dump() const;
  const Stats& stats() const { return stats_; }

 private:
  int W() const { return sc_.world_size; }
  int F() const { return sc_.sharding_factor; }
  bool Chance(double p) {
    return std::uniform_real_distribution<double>(0, 1)(rng_) < p;
  }
  int Uniform(int lo, int hi) {  // Inclusive.
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }
  absl::Duration UniformDuration(absl::Duration lo, absl::Duration hi) {
    return absl::Milliseconds(
        Uniform(static_cast<int>(absl::ToInt64Milliseconds(lo)),
                static_cast<int>(absl::ToInt64Milliseconds(hi))));
  }
  std::vector<int> Shuffled() {
    std::vector<int> order(W());
    for (int r = 0; r < W(); ++r) order[r] = r;
    std::shuffle(order.begin(), order.end(), rng_);
    return order;
  }
  void Note(const std::string& what) {
    log_.push_back(
        absl::StrCat("t=", absl::ToInt64Milliseconds(now_ - kT0), "ms ", what));
  }
  void Violate(const std::string& what) {
    if (!violation_.empty()) return;
    violation_ =
        absl::StrCat("t=", absl::ToInt64Milliseconds(now_ - kT0), "ms: ", what);
    Note(absl::StrCat("VIOLATION: ", what));
  }
  bool Over() const { return !violation_.empty() || done_; }
  Daemon& D(int r) { return ranks_[r].proc; }
  const Daemon& D(int r) const { return ranks_[r].proc; }
  bool Member(int r) const {
    return !D(r).token.empty() && table_->IsLiveMember(r, D(r).token);
  }
  bool Issued(const EpochPlan& plan) const {
    return plan.kind == PlanKind::kNew || plan.kind == PlanKind::kResume ||
           plan.kind == PlanKind::kRollback;
  }
  std::string Describe(int r) const;
  CheckpointInventory Inventory(int r) const;

  // Table calls (each followed by Observe).
  void NewTable();
  void Join(int r);
  void Heartbeat(int r);
  void Observe();
  void OnReady();
  void CheckPlan();
  void CheckPlanIsPure();

  // Daemon actions.
  void ApplyStep(int r, int64_t step);
  void FollowPlan(double react);
  bool ApplyPlan(const EpochPlan& plan, int r);
  void Resume(int r);
  void StartReplacement(int r);

  // Events.
  void Event();
  void Advance(int ticks);
  void Tick();
  void Train(int steps);
  void Kill(int r);
  void KillTwo();
  void Stop(int r);
  void Restart(const std::string& why);
  void InjectReport();
  void Storm();
  void Outage();
  void Calm();

  // Ground truth and invariants.
  int64_t JobStep() const;
  // The daemon holds step step + 1 in doubt and the job committed it.
  bool Committed(const Daemon& d) const {
    return d.holds && d.pending != 0 && d.pending == d.step + 1 &&
           d.pending <= JobStep();
  }
  bool HoldsAt(const Daemon& d, int64_t j) const {
    return d.holds && (d.step == j || (Committed(d) && d.pending == j));
  }
  bool GivenUp(int r) const;
  std::set<int64_t> CommonSteps(View view) const;
  bool Counted(int r, View view) const;
  Judgement Judge(View view) const;
  void Check();
  void CheckReady();
  void OnFailed();

  const Scenario sc_;
  std::mt19937_64 rng_;
  MembershipOptions options_;
  std::optional<MembershipTable> table_;
  std::vector<RankState> ranks_;
  MonoTime now_ = kT0;
  int64_t tokens_ = 0;
  int64_t tables_ = 0;
  MonoTime first_join_ = MonoTime::InfiniteFuture();
  int64_t job_step_ = 0;  // J.
  // Failure reports (and READYs refused for their step) since the last
  // ready epoch.
  int reports_since_ready_ = 0;
  bool storm_ = false;
  MonoTime unrecoverable_since_ = MonoTime::InfiniteFuture();
  MonoTime last_fault_ = kT0;
  // The current table's last removal of a member.
  MonoTime last_removal_ = MonoTime::InfinitePast();
  // What Observe saw last.
  int64_t seen_epoch_ = -1;
  PlanKind seen_kind_ = PlanKind::kWait;
  int64_t seen_plan_step_ = -1;
  bool seen_ready_ = false;
  int64_t seen_ready_epoch_ = -1;
  bool done_ = false;
  std::string violation_;
  std::vector<std::string> log_;
  Stats stats_;
};

std::string Simulation::Describe(int r) const {
  const Daemon& d = D(r);
  std::string s =
      absl::StrCat("rank ", r, " ", d.incarnation, " ", ProcName(d.state));
  if (d.holds) {
    absl::StrAppend(&s, " holds@", d.step);
  } else {
    absl::StrAppend(&s, " no-shard");
  }
  if (d.pending != 0) absl::StrAppend(&s, " pending ", d.pending);
  if (sc_.checkpoints) {
    absl::StrAppend(&s, " ckpts {", absl::StrJoin(ranks_[r].store, ","), "}");
  }
  return s;
}

CheckpointInventory Simulation::Inventory(int r) const {
  CheckpointInventory inv;
  inv.keeps = sc_.checkpoints;
  if (sc_.checkpoints) inv.steps = ranks_[r].store;
  return inv;
}

void Simulation::NewTable() {
  options_.started = now_;
  auto table = MembershipTable::Create(options_);
  if (!table.ok()) {
    Violate(absl::StrCat("Create: ", table.status().ToString()));
    return;
  }
  table_.emplace(*std::move(table));
  ++tables_;
  first_join_ = MonoTime::InfiniteFuture();
  last_removal_ = MonoTime::InfinitePast();
  seen_epoch_ = -1;
  seen_kind_ = PlanKind::kWait;
  seen_plan_step_ = -1;
  seen_ready_ = false;
  seen_ready_epoch_ = -1;
  reports_since_ready_ = 0;
}

void Simulation::Join(int r) {
  Daemon& d = D(r);
  JoinRequestInfo req;
  req.rank = r;
  req.identity = d.identity;
  req.peer_address = absl::StrCat("10.0.0.", r + 1, ":7000");
  req.incarnation = d.incarnation;
  req.last_epoch = d.last_epoch;
  req.holds_shard = d.holds;
  req.last_committed_step = d.step;
  req.pending_step = d.pending;
  req.checkpoints = Inventory(r);
  const std::string token = absl::StrCat("tok-", ++tokens_);
  const bool replaces = table_->slots()[r].live() &&
                        table_->slots()[r].incarnation != d.incarnation;
  auto out = table_->Join(req, now_, token);
  if (!out.ok()) {
    if (out.status().code() == absl::StatusCode::kDataLoss &&
        table_->failed()) {
      return;
    }
    Violate(absl::StrCat("Join of ", Describe(r),
                         " failed: ", out.status().ToString()));
    return;
  }
  if (out->rank != r) {
    Violate(absl::StrCat("Join of rank ", r, " got rank ", out->rank));
  }
  if (first_join_ == MonoTime::InfiniteFuture()) first_join_ = now_;
  if (replaces) last_removal_ = now_;
  d.token = token;
  d.last_epoch = std::max(d.last_epoch, out->epoch);
  d.ready_epoch = -1;
  d.removed_at = MonoTime::InfiniteFuture();
  d.rejoin_at = MonoTime::InfiniteFuture();
  d.next_heartbeat = now_ + kHeartbeat;
  Note(absl::StrCat("join: ", Describe(r), " -> epoch ", out->epoch));
  Observe();
}

void Simulation::Heartbeat(int r) {
  Daemon& d = D(r);
  const int64_t epoch = table_->epoch();
  const EpochPlan& plan = table_->plan();
  bool target = false;
  for (const ShardCopy& c : plan.copies) target |= c.target_rank == r;
  const MemberPhase state =
      d.ready_epoch == epoch
          ? MemberPhase::kReady
          : (target ? MemberPhase::kRecovering : MemberPhase::kJoining);
  const CheckpointInventory inv = Inventory(r);
  const absl::Status s =
      table_->Heartbeat(r, d.token, epoch, d.step, state, now_, {},
                        sc_.checkpoints ? &inv : nullptr);
  d.next_heartbeat = now_ + kHeartbeat;
  d.last_epoch = std::max(d.last_epoch, epoch);
  if (s.ok()) {
    Observe();
    return;
  }
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      Note(absl::StrCat("heartbeat of rank ", r, ": NOT_FOUND, re-joins"));
      d.token.clear();
      Join(r);
      return;
    case absl::StatusCode::kFailedPrecondition:
      // A READY at another step than the plan's: a new epoch.
      ++stats_.wrong_ready;
      ++reports_since_ready_;
      Note(absl::StrCat("heartbeat of ", Describe(r),
                        " refused: ", s.message()));
      Observe();
      return;
    case absl::StatusCode::kDataLoss:
      if (table_->failed()) return;
      [[fallthrough]];
    default:
      Violate(absl::StrCat("Heartbeat of ", Describe(r), " (",
                           MemberPhaseName(state), ", epoch ", epoch,
                           "): ", s.ToString()));
  }
}

// After every table call: plan and readiness changes.
void Simulation::Observe() {
  if (table_->failed() || Over()) return;
  const EpochPlan& plan = table_->plan();
  if (table_->epoch() != seen_epoch_ || plan.kind != seen_kind_ ||
      plan.step != seen_plan_step_) {
    seen_epoch_ = table_->epoch();
    seen_kind_ = plan.kind;
    seen_plan_step_ = plan.step;
    Note(absl::StrCat(
        "  epoch ", table_->epoch(), " plan ", PlanKindName(plan.kind),
        Issued(plan) ? absl::StrCat(" step ", plan.step) : std::string(), ": ",
        plan.reason));
    CheckPlan();
  }
  const bool ready = table_->ready();
  if (ready && !(seen_ready_ && seen_ready_epoch_ == table_->epoch())) {
    OnReady();
  }
  seen_ready_ = ready;
  seen_ready_epoch_ = table_->epoch();
}

void Simulation::CheckPlanIsPure() {
  // The table's issued plan is exactly what the pure plan function decides
  // from the slots the table holds (every slot is claimed once a plan is
  // issued, so the input is settled).
  const EpochPlan& plan = table_->plan();
  PlanInput in;
  in.world_size = W();
  in.sharding_factor = F();
  in.committed_step = table_->committed_step();
  in.settled = true;
  for (const SlotRecord& s : table_->slots()) {
    PlanSlot p;
    p.rank = s.rank;
    p.live = s.live();
    p.holds_shard = s.holds_shard;
    p.held_before = s.held_by_predecessor;
    p.reported = s.phase != MemberPhase::kEmpty;
    p.step = s.committed_step;
    p.pending_step = s.pending_step;
    p.keeps_checkpoints = s.checkpoints.keeps;
    p.checkpoints = s.checkpoints.steps;
    p.checkpoint_problem = s.checkpoints.problem;
    in.slots.push_back(std::move(p));
  }
  const EpochPlan pure = DecideEpochPlan(in);
  auto text = [](const EpochPlan& p) {
    std::string out =
        absl::StrCat(PlanKindName(p.kind), " step ", p.step, " restores ",
                     absl::StrJoin(p.restores, ","), " copies");
    for (const ShardCopy& c : p.copies) {
      absl::StrAppend(&out, " ", c.target_rank, ":", c.shard_index, "<-",
                      absl::StrJoin(c.source_ranks, ","));
    }
    return out;
  };
  ++stats_.plans_checked;
  if (text(pure) != text(plan)) {
    Violate(absl::StrCat("epoch ", table_->epoch(), ": the table's plan (",
                         text(plan), ") is not the pure plan of its slots (",
                         text(pure), ")"));
  }
}

void Simulation::CheckPlan() {
  const EpochPlan& plan = table_->plan();
  if (!Issued(plan)) return;
  CheckPlanIsPure();
  const int64_t j = JobStep();
  const std::set<int64_t> common = CommonSteps(View::kTable);
  switch (plan.kind) {
    case PlanKind::kNew:
      if (j != 0) {
        Violate(absl::StrCat("plan NEW although the job committed step ", j));
      } else if (!common.empty() && *common.rbegin() > 0) {
        Violate(absl::StrCat(
            "plan NEW (start at step 0) although every rank holds a verified "
            "checkpoint of step ",
            *common.rbegin(), ": the job trained and could roll back to it"));
      }
      break;
    case PlanKind::kResume:
      if (plan.step != j) {
        Violate(absl::StrCat("plan RESUME at step ", plan.step,
                             " but the job is at step ", j));
      }
      break;
    case PlanKind::kRollback: {
      bool every_shard_held = true;
      for (int i = 0; i < F(); ++i) {
        bool held = false;
        for (int r = i; r < W(); r += F()) {
          held |= Counted(r, View::kStrict) && HoldsAt(D(r), j);
        }
        every_shard_held &= held;
      }
      // (A rollback to J itself, e.g. re-planned while the members restore,
      // loses nothing.)
      if (every_shard_held && plan.step < j) {
        Violate(absl::StrCat("plan ROLLBACK to ", plan.step,
                             " although every shard has a holder at step ", j));
      } else if (common.empty() || *common.rbegin() != plan.step) {
        Violate(absl::StrCat("plan ROLLBACK to ", plan.step,
                             " but the highest step every rank holds is ",
                             common.empty() ? std::string("none")
                                            : absl::StrCat(*common.rbegin())));
      }
      break;
    }
    default:
      break;
  }
}

void Simulation::OnReady() {
  ++stats_.ready_epochs;
  reports_since_ready_ = 0;
  const int64_t s = table_->committed_step();
  const int64_t j = JobStep();
  Note(absl::StrCat("  epoch ", table_->epoch(), " READY at step ", s));
  if (s > j) {
    Violate(absl::StrCat("ready at step ", s, " above the job's step ", j));
    return;
  }
  if (s < j) {
    const EpochPlan& plan = table_->plan();
    if (plan.kind != PlanKind::kRollback || plan.step != s) {
      Violate(absl::StrCat("ready at step ", s, " below the job's step ", j,
                           " without a checkpoint rollback (plan ",
                           PlanKindName(plan.kind), " at ", plan.step, ")"));
      return;
    }
  }
  if (j < job_step_) ++stats_.forgotten;
  job_step_ = s;
  CheckReady();
}

// Invariant 1.
void Simulation::CheckReady() {
  const int64_t s = table_->committed_step();
  if (s != JobStep()) {
    Violate(absl::StrCat("ready with committed step ", s, " but the job is at ",
                         JobStep()));
    return;
  }
  for (int r = 0; r < W(); ++r) {
    const Daemon& d = D(r);
    if (d.state == Proc::kDead) continue;  // Its lease has yet to run out.
    if (table_->slots()[r].incarnation != d.incarnation) {
      Violate(absl::StrCat("ready but slot ", r, " is held by ",
                           table_->slots()[r].incarnation, ", not ",
                           Describe(r)));
      return;
    }
    int64_t step = d.step;
    if (d.pending == d.step + 1 && table_->committed_step() >= d.pending) {
      step = d.pending;  // Committed, applied at the next epoch.
    }
    if (!d.holds || step != s) {
      Violate(absl::StrCat("ready at step ", s, " but ", Describe(r)));
      return;
    }
  }
}

void Simulation::ApplyStep(int r, int64_t step) {
  Daemon& d = D(r);
  d.holds = true;
  d.step = step;
  d.pending = 0;
  if (sc_.checkpoints && step % sc_.checkpoint_every == 0) {
    std::vector<int64_t>& store = ranks_[r].store;
    store.erase(std::remove(store.begin(), store.end(), step), store.end());
    store.push_back(step);
    std::sort(store.begin(), store.end());
    while (store.size() > 2) store.erase(store.begin());
  }
}

// Follows the plan for one daemon that is not a copy target. False when it
// cannot.
bool Simulation::ApplyPlan(const EpochPlan& plan, int r) {
  Daemon& d = D(r);
  switch (plan.kind) {
    case PlanKind::kNew:
      d.holds = true;
      d.step = 0;
      d.pending = 0;
      return true;
    case PlanKind::kResume:
      if (d.holds && d.step + 1 == plan.step && d.pending == plan.step) {
        ApplyStep(r, plan.step);  // The in-doubt step was committed.
      }
      d.pending = 0;
      if (!d.holds && plan.step == 0) {
        // A shard nobody holds before any commit: its model's initial
        // values, which registering the model recreates.
        d.holds = true;
        d.step = 0;
      }
      if (!d.holds || d.step != plan.step) {
        Violate(absl::StrCat("plan RESUME at step ", plan.step, " has rank ", r,
                             " keep its shard, but ", Describe(r)));
        return false;
      }
      return true;
    case PlanKind::kRollback: {
      const bool restore = std::find(plan.restores.begin(), plan.restores.end(),
                                     r) != plan.restores.end();
      // Every member removes its checkpoints above the step it goes back
      // to: a timeline the rollback abandons (as shardd does).
      std::vector<int64_t>& kept = ranks_[r].store;
      kept.erase(std::remove_if(kept.begin(), kept.end(),
                                [&](int64_t c) { return c > plan.step; }),
                 kept.end());
      if (!restore && d.holds && d.step + 1 == plan.step &&
          d.pending == plan.step) {
        ApplyStep(r, plan.step);  // The in-doubt step was committed.
      }
      d.pending = 0;
      if (!restore) {
        if (!d.holds || d.step != plan.step) {
          Violate(absl::StrCat("plan ROLLBACK to ", plan.step,
                               " does not restore rank ", r, ", but ",
                               Describe(r)));
          return false;
        }
        return true;
      }
      const std::vector<int64_t>& store = ranks_[r].store;
      if (std::find(store.begin(), store.end(), plan.step) == store.end()) {
        Violate(absl::StrCat("plan ROLLBACK to ", plan.step, ": ", Describe(r),
                             " cannot restore it"));
        return false;
      }
      d.holds = true;
      d.step = plan.step;
      if (job_step_ > plan.step) {
        // The plan was checked (CheckPlan): the job goes back to the
        // checkpoint as soon as one member restored it.
        Note(absl::StrCat("rank ", r, " restored checkpoint ", plan.step,
                          ": the job rolls back from step ", job_step_));
        job_step_ = plan.step;
        ++stats_.rollbacks;
      }
      return true;
    }
    default:
      return false;
  }
}

// Live daemons follow the current epoch's plan (each with probability
// `react` per call, so that faults interleave with recoveries) and report
// READY.
void Simulation::FollowPlan(double react) {
  for (int round = 0; round < 8 && !Over() && !table_->failed(); ++round) {
    const int64_t epoch = table_->epoch();
    const EpochPlan plan = table_->plan();
    if (!Issued(plan)) return;
    std::vector<int> targets;
    for (const ShardCopy& c : plan.copies) targets.push_back(c.target_rank);
    auto wants = [&](int r) {
      const Daemon& d = D(r);
      return d.state == Proc::kAlive && d.ready_epoch != epoch && Member(r);
    };
    // Holders first: an in-doubt source applies its step before a copy.
    for (const int r : Shuffled()) {
      if (Over() || table_->epoch() != epoch) break;
      if (std::find(targets.begin(), targets.end(), r) != targets.end()) {
        continue;
      }
      if (!wants(r) || !Chance(react)) continue;
      if (!ApplyPlan(plan, r)) return;
      D(r).ready_epoch = epoch;
      Heartbeat(r);
    }
    for (const ShardCopy& c : plan.copies) {
      if (Over() || table_->epoch() != epoch) break;
      const int r = c.target_rank;
      if (!wants(r) || !Chance(react)) continue;
      int source = -1;
      for (const int s : c.source_ranks) {
        const Daemon& src = D(s);
        if (src.state != Proc::kAlive) continue;  // Dead or hung: try next.
        if (src.holds && src.step == plan.step) {
          source = s;
          break;
        }
        if (src.ready_epoch == epoch) {
          Violate(absl::StrCat("plan RESUME at step ", plan.step, " names ",
                               Describe(s), " as a source for rank ", r));
          return;
        }
      }
      if (source < 0) continue;  // Waits (RECOVERING).
      Daemon& d = D(r);
      d.holds = true;
      d.step = plan.step;
      d.pending = 0;
      d.ready_epoch = epoch;
      Note(absl::StrCat("rank ", r, " copied shard ", c.shard_index,
                        " at step ", plan.step, " from rank ", source));
      Heartbeat(r);
    }
    if (table_->epoch() == epoch) return;
  }
}

void Simulation::StartReplacement(int r) {
  RankState& k = ranks_[r];
  Daemon d;
  d.identity = absl::StrCat("pod-", r);
  d.incarnation = absl::StrCat("pod-", r, "/", ++k.incarnations);
  k.proc = d;
  k.replace_at = MonoTime::InfiniteFuture();
  Join(r);
}

void Simulation::Resume(int r) {
  Daemon& d = D(r);
  d.state = Proc::kAlive;
  d.resume_at = MonoTime::InfiniteFuture();
  Note(absl::StrCat("SIGCONT ", Describe(r)));
  if (d.token.empty()) {
    Join(r);
    return;
  }
  if (Member(r) && table_->ready() && d.ready_epoch == table_->epoch() &&
      d.pending == d.step + 1 && table_->committed_step() >= d.pending) {
    // Its lease still runs and its epoch goes on: it learns that the step
    // committed and applies it. (Otherwise it stays in doubt until the next
    // epoch's plan.)
    ApplyStep(r, d.pending);
  }
  Heartbeat(r);  // NOT_FOUND: re-joins holding its shard.
}

void Simulation::Tick() {
  now_ += kTick;
  const std::vector<int> order = Shuffled();
  for (const int r : order) {
    if (Over() || table_->failed()) return;
    RankState& k = ranks_[r];
    Daemon& d = k.proc;
    if (d.state == Proc::kDead && now_ >= k.replace_at) {
      StartReplacement(r);
    } else if (d.state == Proc::kStopped && now_ >= d.resume_at) {
      Resume(r);
    } else if (d.state == Proc::kAlive && now_ >= d.rejoin_at) {
      d.rejoin_at = MonoTime::InfiniteFuture();
      if (d.token.empty()) {
        Join(r);
      } else {
        Heartbeat(r);
      }
    }
  }
  for (const int r : order) {
    if (Over() || table_->failed()) return;
    Daemon& d = D(r);
    if (d.state == Proc::kAlive && !d.token.empty() &&
        d.rejoin_at == MonoTime::InfiniteFuture() && now_ >= d.next_heartbeat) {
      Heartbeat(r);
    }
  }
  if (Over() || table_->failed()) return;
  for (const int r : table_->ExpireLeases(now_)) {
    Note(absl::StrCat("lease expired: ", Describe(r)));
    if (table_->slots()[r].incarnation == D(r).incarnation) {
      D(r).removed_at = now_;
    }
    last_removal_ = now_;
  }
  Observe();
  FollowPlan(0.6);
}

void Simulation::Advance(int ticks) {
  for (int i = 0; i < ticks && !Over(); ++i) {
    Tick();
    Check();
  }
}

void Simulation::Train(int steps) {
  for (int i = 0; i < steps && !Over(); ++i) {
    if (!table_->ready()) return;
    const int64_t epoch = table_->epoch();
    for (int r = 0; r < W(); ++r) {
      const Daemon& d = D(r);
      if (d.state != Proc::kAlive || !Member(r) || d.ready_epoch != epoch ||
          d.pending != 0) {
        return;  // The collective waits for it (until its lease runs out).
      }
    }
    const int64_t next = table_->committed_step() + 1;
    const int roll = Uniform(0, 99);
    if (roll < 6) {
      // A daemon is SIGSTOPped during the vote: the step commits, it holds
      // it in doubt.
      const int m = Uniform(0, W() - 1);
      table_->CommitStep(next);
      for (int r = 0; r < W(); ++r) {
        if (r != m) ApplyStep(r, next);
      }
      D(m).pending = next;
      job_step_ = next;
      ++stats_.steps;
      ++stats_.in_doubt;
      Note(absl::StrCat("step ", next, " committed; rank ", m,
                        " was stopped during the vote and holds it in doubt"));
      Stop(m);
      for (int r = 0; r < W(); ++r) {
        if (r != m && !Over()) Heartbeat(r);
      }
      return;
    }
    if (roll < 10) {
      // The coordinator crashes during the vote: some daemons heard the
      // commit and applied it, the others hold it in doubt.
      std::vector<int> applied;
      for (int r = 0; r < W(); ++r) {
        if (Chance(0.5)) {
          ApplyStep(r, next);
          applied.push_back(r);
        } else {
          D(r).pending = next;
        }
      }
      if (!applied.empty()) job_step_ = next;
      ++stats_.steps;
      ++stats_.in_doubt;
      Note(absl::StrCat("step ", next,
                        ": the coordinator crashes during the "
                        "vote; applied by ranks {",
                        absl::StrJoin(applied, ","), "}, in doubt elsewhere"));
      Restart("crash during the vote");
      return;
    }
    table_->CommitStep(next);
    for (int r = 0; r < W(); ++r) ApplyStep(r, next);
    job_step_ = next;
    ++stats_.steps;
    Note(absl::StrCat("step ", next, " committed and applied"));
    for (int r = 0; r < W() && !Over(); ++r) Heartbeat(r);
    Check();
  }
}

void Simulation::Kill(int r) {
  RankState& k = ranks_[r];
  if (k.proc.state == Proc::kDead) return;
  Note(absl::StrCat("SIGKILL ", Describe(r)));
  k.proc.state = Proc::kDead;
  k.proc.token.clear();
  k.replace_at =
      now_ + UniformDuration(absl::Milliseconds(100), kMaxReplaceDelay);
  last_fault_ = now_;
  ++stats_.kills;
}

void Simulation::KillTwo() {
  int a = Uniform(0, W() - 1);
  int b = Uniform(0, W() - 2);
  if (W() / F() >= 2 && Chance(0.5)) {
    // Both holders of one shard (the first two of its replica group).
    a = Uniform(0, F() - 1);
    b = a + F();
  } else if (b >= a) {
    ++b;
  }
  Note(absl::StrCat("kill two: ranks ", a, " and ", b));
  Kill(a);
  Kill(b);
}

void Simulation::Stop(int r) {
  Daemon& d = D(r);
  if (d.state != Proc::kAlive) return;
  d.state = Proc::kStopped;
  d.resume_at = now_ + UniformDuration(absl::Milliseconds(100), kMaxStop);
  Note(absl::StrCat("SIGSTOP ", Describe(r), " until t=",
                    absl::ToInt64Milliseconds(d.resume_at - kT0), "ms"));
  last_fault_ = now_;
  ++stats_.stops;
}

void Simulation::Restart(const std::string& why) {
  Note(absl::StrCat("coordinator restart (", why, ")"));
  NewTable();
  for (int r = 0; r < W(); ++r) {
    Daemon& d = D(r);
    d.ready_epoch = -1;
    d.removed_at = MonoTime::InfiniteFuture();
    if (d.state == Proc::kAlive) {
      d.rejoin_at =
          now_ + UniformDuration(absl::ZeroDuration(), kMaxRejoinDelay);
    }
  }
  last_fault_ = now_;
  ++stats_.restarts;
  Observe();
}

void Simulation::InjectReport() {
  // Normal runs stay below the stall limit (invariant 2).
  if (reports_since_ready_ >= options_.max_failed_epochs - 1) return;
  std::vector<int> reporters;
  for (int r = 0; r < W(); ++r) {
    if (D(r).state == Proc::kAlive && Member(r)) reporters.push_back(r);
  }
  if (reporters.empty()) return;
  const int r = reporters[Uniform(0, static_cast<int>(reporters.size()) - 1)];
  ++reports_since_ready_;
  Note(absl::StrCat("rank ", r, " reports its communicators broken"));
  auto out = table_->ReportFailure(r, D(r).token, table_->epoch(), -1,
                                   "simulated", ProbeResult::kNotProbed, now_);
  if (!out.ok()) {
    Violate(absl::StrCat("ReportFailure: ", out.status().ToString()));
    return;
  }
  Observe();
}

// A ready job whose members keep failing their epochs: the stall limit ends
// it after exactly max_failed_epochs failed epochs (the ready epoch's failure
// does not count).
void Simulation::Storm() {
  if (!table_->ready()) return;
  std::vector<int> reporters;
  for (int r = 0; r < W(); ++r) {
    if (D(r).state == Proc::kAlive && Member(r)) reporters.push_back(r);
  }
  if (reporters.empty()) return;
  storm_ = true;
  const int n = options_.max_failed_epochs + 1;
  Note(absl::StrCat("report storm: ", n, " failure reports in a row"));
  for (int k = 1; k <= n && !Over(); ++k) {
    const int r = reporters[Uniform(0, static_cast<int>(reporters.size()) - 1)];
    auto out = table_->ReportFailure(r, D(r).token, table_->epoch(), -1,
                                     "storm", ProbeResult::kNotProbed, now_);
    if (!out.ok()) {
      Violate(absl::StrCat("storm report ", k, ": ", out.status().ToString()));
      return;
    }
    Observe();
    if (k < n && table_->failed()) {
      Violate(absl::StrCat("failed after ", k, " storm reports (limit ",
                           options_.max_failed_epochs,
                           "): ", table_->failure()));
      return;
    }
  }
  if (!table_->failed()) {
    Violate(absl::StrCat("not failed after ", n, " storm reports"));
  }
}

void Simulation::Outage() {
  Note("outage: every daemon is killed and the coordinator restarts");
  for (int r = 0; r < W(); ++r) Kill(r);
  Restart("outage");
}

void Simulation::Event() {
  ++stats_.events;
  const int roll = Uniform(0, 99);
  if (roll < 33) {
    Advance(Uniform(1, 40));
  } else if (roll < 57) {
    Train(Uniform(1, 5));
  } else if (roll < 65) {
    Kill(Uniform(0, W() - 1));
  } else if (roll < 69) {
    KillTwo();
  } else if (roll < 77) {
    Stop(Uniform(0, W() - 1));
  } else if (roll < 82) {
    Restart("restart");
  } else if (roll < 91) {
    InjectReport();
  } else if (roll < 92) {
    Storm();
  } else if (roll < 94 && sc_.outages) {
    Outage();
  } else {
    Advance(Uniform(1, 10));
  }
}

// Invariant 5: no more faults; every stopped daemon resumes and every dead
// one is replaced on schedule.
void Simulation::Calm() {
  const MonoTime start = now_;
  const absl::Duration bound = kMaxStop + kMaxReplaceDelay + 3 * kLease +
                               2 * table_->options().rejoin_grace +
                               absl::Seconds(2);
  Note("calm: no more faults");
  while (!Over() && now_ < start + bound) {
    Tick();
    Check();
    if (Over()) return;
    bool settled = table_->ready();
    for (int r = 0; r < W() && settled; ++r) {
      settled = D(r).state == Proc::kAlive && Member(r) &&
                D(r).ready_epoch == table_->epoch();
    }
    if (settled) break;
  }
  if (Over()) return;
  if (!table_->ready()) {
    Violate(absl::StrCat("not ready ", absl::FormatDuration(now_ - start),
                         " after the faults stopped, although the job is ",
                         Judge(View::kStrict).why));
    return;
  }
  Train(3);
  Check();
}

// J, less a commit that nobody can learn any more (see the file comment).
int64_t Simulation::JobStep() const {
  if (table_->committed_step() >= job_step_) return job_step_;
  int64_t known = table_->committed_step();
  for (int r = 0; r < W(); ++r) {
    const Daemon& d = D(r);
    if (d.state == Proc::kDead || !d.holds) continue;
    if (d.step >= job_step_) return job_step_;
    known = std::max(known, d.step);
  }
  // A checkpoint on disk proves its step was reached: the job is not new.
  for (int r = 0; r < W(); ++r) {
    for (const int64_t step : ranks_[r].store) known = std::max(known, step);
  }
  return std::min(known, job_step_);
}

bool Simulation::GivenUp(int r) const {
  const Daemon& d = D(r);
  const SlotRecord& slot = table_->slots()[r];
  if (slot.live() && slot.incarnation == d.incarnation) return false;
  const MonoTime from =
      d.removed_at != MonoTime::InfiniteFuture() ? d.removed_at : first_join_;
  if (from == MonoTime::InfiniteFuture()) return false;
  return now_ >= from + table_->options().rejoin_grace;
}

bool Simulation::Counted(int r, View view) const {
  switch (D(r).state) {
    case Proc::kAlive:
      return true;
    case Proc::kDead:
      return view == View::kTable && table_->slots()[r].live() &&
             table_->slots()[r].incarnation == D(r).incarnation;
    case Proc::kStopped:
      return view != View::kLenient || !GivenUp(r);
  }
  return false;
}

std::set<int64_t> Simulation::CommonSteps(View view) const {
  std::set<int64_t> common;
  for (int r = 0; r < W(); ++r) {
    std::set<int64_t> mine(ranks_[r].store.begin(), ranks_[r].store.end());
    if (Counted(r, view) && D(r).holds) {
      // Exactly at it, or there after applying a committed in-doubt step.
      mine.insert(D(r).step);
      if (Committed(D(r))) mine.insert(D(r).pending);
    }
    if (r == 0) {
      common = std::move(mine);
      continue;
    }
    std::set<int64_t> both;
    std::set_intersection(common.begin(), common.end(), mine.begin(),
                          mine.end(), std::inserter(both, both.begin()));
    common = std::move(both);
  }
  return common;
}

Judgement Simulation::Judge(View view) const {
  const int64_t j = JobStep();
  if (j == 0) return {true, "recoverable: no step committed yet"};
  std::vector<int> lost;
  for (int i = 0; i < F(); ++i) {
    bool held = false;
    for (int r = i; r < W(); r += F()) {
      held |= Counted(r, view) && HoldsAt(D(r), j);
    }
    if (!held) lost.push_back(i);
  }
  if (lost.empty()) {
    return {true,
            absl::StrCat("recoverable: every shard has a holder at step ", j)};
  }
  const std::set<int64_t> common = CommonSteps(view);
  if (!common.empty()) {
    return {true,
            absl::StrCat("recoverable: shard(s) ", absl::StrJoin(lost, ","),
                         " lost at step ", j, " but every rank holds step ",
                         *common.rbegin())};
  }
  return {false,
          absl::StrCat("unrecoverable: shard(s) ", absl::StrJoin(lost, ","),
                       " have no holder at step ", j,
                       " and no step is held by every rank")};
}

void Simulation::OnFailed() {
  done_ = true;
  Note(absl::StrCat("JOB FAILED: ", table_->failure()));
  bool stalled = false;
  bool job_failed = false;
  for (const Decision& d : table_->decisions()) {
    stalled |= d.kind == DecisionKind::kEpochStalled;
    job_failed |= d.kind == DecisionKind::kJobFailed;
  }
  if (!job_failed) Violate("failed without a JOB_FAILED decision");
  if (stalled) {
    ++stats_.stalled;
    if (!storm_) {
      Violate(absl::StrCat(
          "EPOCH_STALLED although the simulator made at most ",
          options_.max_failed_epochs - 1,
          " epochs fail in a row (failure reports, READYs refused): ",
          table_->failure()));
    }
  } else {
    ++stats_.unrecoverable;
    const Judgement g = Judge(View::kLenient);
    if (g.recoverable) {
      Violate(absl::StrCat("the table failed (", table_->failure(),
                           ") but the job is ", g.why));
    }
  }
  // Invariant 4: terminal, and every call says so.
  const std::string failure = table_->failure();
  table_->Settle(now_ + absl::Seconds(60));
  table_->ExpireLeases(now_ + absl::Seconds(60));
  if (!table_->failed() || table_->failure() != failure) {
    Violate("the failure did not stay");
  }
  for (int r = 0; r < W(); ++r) {
    const Daemon& d = D(r);
    if (d.token.empty()) continue;
    const absl::Status s = table_->Heartbeat(r, d.token, table_->epoch(),
                                             d.step, MemberPhase::kReady, now_);
    if (s.code() != absl::StatusCode::kDataLoss) {
      Violate(absl::StrCat("heartbeat after failure: ", s.ToString()));
    }
    auto rep = table_->ReportFailure(r, d.token, table_->epoch(), -1, "late",
                                     ProbeResult::kNotProbed, now_);
    if (rep.status().code() != absl::StatusCode::kDataLoss) {
      Violate(absl::StrCat("report after failure: ", rep.status().ToString()));
    }
  }
  JoinRequestInfo req;
  req.rank = 0;
  req.identity = "pod-0";
  req.peer_address = "10.0.0.1:7000";
  req.incarnation = "after-failure";
  auto join = table_->Join(req, now_, "tok-late");
  if (join.status().code() != absl::StatusCode::kDataLoss) {
    Violate(absl::StrCat("join after failure: ", join.status().ToString()));
  }
}

void Simulation::Check() {
  if (Over()) return;
  if (table_->failed()) {
    OnFailed();
    return;
  }
  if (table_->ready()) CheckReady();
  if (Over()) return;
  const Judgement strict = Judge(View::kStrict);
  if (strict.recoverable) {
    unrecoverable_since_ = MonoTime::InfiniteFuture();
    return;
  }
  if (unrecoverable_since_ == MonoTime::InfiniteFuture()) {
    unrecoverable_since_ = now_;
  }
  bool all_claimed = true;
  for (int r = 0; r < W() && all_claimed; ++r) {
    all_claimed = D(r).state == Proc::kAlive && Member(r);
  }
  if (all_claimed) {
    Violate(
        absl::StrCat("every slot is claimed by its running daemon and the "
                     "job is ",
                     strict.why, ", but the table has not failed"));
    return;
  }
  // Without checkpoints nothing can be waited for once the grace after the
  // table's first join and after its last removal ran out, if the table
  // knows the job's step (a restarted one learns it from a holder's join)
  // and no killed holder's lease still runs (the table cannot know yet).
  bool leased_dead = false;
  for (int r = 0; r < W(); ++r) {
    leased_dead |= D(r).state == Proc::kDead && table_->slots()[r].live() &&
                   table_->slots()[r].incarnation == D(r).incarnation;
  }
  if (!sc_.checkpoints && !leased_dead &&
      table_->committed_step() >= JobStep() &&
      first_join_ != MonoTime::InfiniteFuture() &&
      now_ >= std::max({unrecoverable_since_, first_join_, last_removal_}) +
                  table_->options().rejoin_grace + kTick) {
    Violate(absl::StrCat("the job is ", strict.why, " since t=",
                         absl::ToInt64Milliseconds(unrecoverable_since_ - kT0),
                         "ms, the rejoin grace ran out, but the table has not "
                         "failed"));
    return;
  }
  const absl::Duration bound = kMaxStop + kMaxReplaceDelay + kLease +
                               table_->options().rejoin_grace + 4 * kTick;
  if (now_ > std::max(unrecoverable_since_, last_fault_) + bound) {
    Violate(absl::StrCat("the job is ", strict.why, " since t=",
                         absl::ToInt64Milliseconds(unrecoverable_since_ - kT0),
                         "ms but the table has not failed"));
  }
}

std::string Simulation::Run() {
  options_.world_size = sc_.world_size;
  options_.sharding_factor = sc_.sharding_factor;
  options_.detector.lease = kLease;
  options_.rejoin_grace = Chance(0.5) ? absl::ZeroDuration() : 2 * kLease;
  options_.max_failed_epochs = Chance(0.7) ? 5 : Uniform(2, 4);
  now_ = kT0;
  NewTable();
  ranks_.assign(W(), RankState{});
  for (int r = 0; r < W(); ++r) {
    RankState& k = ranks_[r];
    k.proc.identity = absl::StrCat("pod-", r);
    k.proc.incarnation = absl::StrCat("pod-", r, "/", ++k.incarnations);
    k.proc.rejoin_at =
        now_ + UniformDuration(absl::ZeroDuration(), absl::Milliseconds(500));
  }
  Note(absl::StrCat(
      "W=", W(), " F=", F(), " checkpoints=",
      sc_.checkpoints ? absl::StrCat("every ", sc_.checkpoint_every)
                      : std::string("off"),
      " lease=", absl::FormatDuration(kLease),
      " rejoin_grace=", absl::FormatDuration(table_->options().rejoin_grace),
      " max_failed_epochs=", options_.max_failed_epochs));
  for (int i = 0; i < sc_.events && !Over(); ++i) {
    Event();
    Check();
  }
  if (!Over()) Calm();
  stats_.runs = 1;
  stats_.simulated_ms = absl::ToInt64Milliseconds(now_ - kT0);
  return violation_;
}

std::string Simulation::Dump() const {
  std::string out = absl::StrJoin(log_, "\n");
  if (table_.has_value()) {
    absl::StrAppend(&out, "\n-- the table's last decisions:");
    const auto& decisions = table_->decisions();
    const size_t from = decisions.size() > 40 ? decisions.size() - 40 : 0;
    for (size_t i = from; i < decisions.size(); ++i) {
      const Decision& d = decisions[i];
      absl::StrAppend(&out, "\n  t=", absl::ToInt64Milliseconds(d.time - kT0),
                      "ms epoch ", d.epoch, " ", DecisionKindName(d.kind), " {",
                      absl::StrJoin(d.ranks, ","), "} ", d.reason);
    }
  }
  return out;
}

// --seed=N (e.g. bazel test --test_arg=--seed=N) or SHARDD_SIM_SEED.
std::optional<uint64_t> SeedToReplay() {
  for (const std::string& arg : ::testing::internal::GetArgvs()) {
    uint64_t seed = 0;
    if (absl::StartsWith(arg, "--seed=") &&
        absl::SimpleAtoi(arg.substr(7), &seed)) {
      return seed;
    }
  }
  const char* env = std::getenv("SHARDD_SIM_SEED");
  uint64_t seed = 0;
  if (env != nullptr && absl::SimpleAtoi(env, &seed)) return seed;
  return std::nullopt;
}

void RunScenario(const Scenario& scenario) {
  const std::optional<uint64_t> replay = SeedToReplay();
  int runs = replay.has_value() ? 1 : scenario.runs;
  if (const char* env = std::getenv("SHARDD_SIM_RUNS"); env != nullptr) {
    if (!absl::SimpleAtoi(env, &runs)) runs = scenario.runs;
  }
  const uint64_t base =
      replay.has_value()
          ? *replay
          : (static_cast<uint64_t>(std::random_device{}()) << 32 |
             std::random_device{}());
  const std::string test = absl::StrCat(
      ::testing::UnitTest::GetInstance()
          ->current_test_info()
          ->test_suite_name(),
      ".", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::cout << "[sim] " << test << ": base seed " << base << ", " << runs
            << " runs (seed of run i = base + i)" << std::endl;
  const auto start = std::chrono::steady_clock::now();
  Stats total;
  for (int i = 0; i < runs; ++i) {
    const uint64_t seed = base + static_cast<uint64_t>(i);
    Simulation sim(scenario, seed);
    const std::string violation = sim.Run();
    total.Add(sim.stats());
    if (!violation.empty()) {
      ADD_FAILURE() << "seed " << seed << ": " << violation
                    << "\nreplay: SHARDD_SIM_SEED=" << seed
                    << " SHARDD_SIM_RUNS=1 --gtest_filter=" << test
                    << "\n-- event log:\n"
                    << sim.Dump();
      break;
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << "[sim] " << test << ": " << total.runs << " runs, "
            << total.events << " events, " << total.simulated_ms / 1000
            << " simulated s in " << secs << " s; " << total.steps << " steps ("
            << total.in_doubt << " interrupted), " << total.ready_epochs
            << " ready epochs, " << total.rollbacks << " checkpoint rollbacks, "
            << total.forgotten << " forgotten in-doubt commits, " << total.kills
            << " kills, " << total.stops << " stops, " << total.restarts
            << " coordinator restarts, " << total.wrong_ready
            << " READYs refused, " << total.plans_checked
            << " issued plans equal to the pure plan; jobs failed: "
            << total.unrecoverable << " unrecoverable, " << total.stalled
            << " stalled (storms)" << std::endl;
}

TEST(MembershipSimulationTest, FourRanksTwoShardsWithoutCheckpoints) {
  Scenario s;
  s.world_size = 4;
  s.sharding_factor = 2;
  s.runs = 2000;
  RunScenario(s);
}

TEST(MembershipSimulationTest, FourRanksTwoShardsWithCheckpoints) {
  Scenario s;
  s.world_size = 4;
  s.sharding_factor = 2;
  s.checkpoints = true;
  s.checkpoint_every = 3;
  s.runs = 2000;
  RunScenario(s);
}

TEST(MembershipSimulationTest, SixRanksThreeShardsWithCheckpoints) {
  Scenario s;
  s.world_size = 6;
  s.sharding_factor = 3;
  s.checkpoints = true;
  s.checkpoint_every = 2;
  s.runs = 1000;
  RunScenario(s);
}

TEST(MembershipSimulationTest, FourRanksFourShardsWithCheckpoints) {
  Scenario s;
  s.world_size = 4;
  s.sharding_factor = 4;
  s.checkpoints = true;
  s.checkpoint_every = 2;
  s.runs = 1000;
  RunScenario(s);
}

// Issue #23's scale: W = 1,024 (F = 8, 128 replicas of each shard), kills
// with replacements, stops, restarts of the coordinator (every daemon
// re-joins, the forming joins share an epoch) and training, every issued
// plan checked against the pure plan function of the table's slots.
TEST(MembershipSimulationTest, ThousandRanksKillsReplacementsAndRestarts) {
  Scenario s;
  s.world_size = 1024;
  s.sharding_factor = 8;
  s.checkpoints = true;
  s.checkpoint_every = 2;
  s.events = 60;
  s.runs = 20;
  RunScenario(s);
}

TEST(MembershipSimulationTest, WholeClusterOutagesWithCheckpoints) {
  Scenario s;
  s.world_size = 4;
  s.sharding_factor = 2;
  s.checkpoints = true;
  s.checkpoint_every = 2;
  s.outages = true;
  s.runs = 1000;
  RunScenario(s);
}

}  // namespace
}  // namespace shardd::coordinator
