// Fault tests of the Gloo collectives: W = 4 processes on 127.0.0.1; rank 1
// kills itself with SIGKILL (or stops itself with SIGSTOP) in the middle of
// each operation (as soon as its own Stats() shows the 64 MiB operation
// running; for barrier, right before entering it). The three survivors must
// get UNAVAILABLE or DEADLINE_EXCEEDED within the operation's timeout plus
// slack (no hang, no crash), see later operations fail too, abort and
// destroy the communicator without leaking a thread, and then form the next
// epoch's communicator (the 3 survivors renumbered, or with a replacement
// process in the victim's slot) and all-reduce on it.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/collectives/process_group.h"
#include "tests/collectives/worker_driver.h"

namespace shardd::testing {
namespace {

constexpr int kWorld = 4;
constexpr int kVictim = 1;
constexpr int64_t kOpTimeoutMs = 3000;
// Scheduling slack on a shared 2-core machine running 4 processes.
constexpr int64_t kSlackMs = 2000;

int64_t IntField(const std::map<std::string, std::string>& result,
                 const std::string& key) {
  auto it = result.find(key);
  int64_t v = -1;
  if (it == result.end() || !absl::SimpleAtoi(it->second, &v)) return -1;
  return v;
}

std::string Field(const std::map<std::string, std::string>& result,
                  const std::string& key) {
  auto it = result.find(key);
  return it == result.end() ? "<missing>" : it->second;
}

// The names in /dev/shm that contain `token`.
std::vector<std::string> ShmEntries(const std::string& token) {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (dirent* entry = ::readdir(dir)) {
    if (std::string(entry->d_name).find(token) != std::string::npos) {
      names.push_back(entry->d_name);
    }
  }
  ::closedir(dir);
  return names;
}

void RunFault(const std::string& op, const std::string& signal,
              const std::string& epoch2,
              const std::string& transport = "gloo") {
  const std::string label =
      absl::StrCat("fault_", op, "_", signal, "_", epoch2, "_", transport);
  const std::string dir = MakeTempDir(label);
  ASSERT_FALSE(dir.empty());
  // A group name of this run alone: the shared-memory segment is named
  // after it, so /dev/shm can be checked for leftovers.
  const std::string comm_group =
      absl::StrCat("fault_", ::getpid(), "_", op, "_", signal, "_", transport);
  const std::vector<std::string> args = {
      absl::StrCat("--transport=", transport),
      absl::StrCat("--group=", comm_group),
      "--scenario=fault",
      absl::StrCat("--size=", kWorld),
      absl::StrCat("--store=", dir),
      "--epoch=1",
      absl::StrCat("--op=", op),
      absl::StrCat("--signal=", signal),
      absl::StrCat("--victim=", kVictim),
      absl::StrCat("--op_timeout_ms=", kOpTimeoutMs),
      "--connect_timeout_ms=60000",
      absl::StrCat("--fault_bytes=", int64_t{64} << 20),
      absl::StrCat("--epoch2=", epoch2)};
  ProcessGroup group;  // SIGKILLs and reaps everything on every exit path.
  std::vector<Worker> workers;
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<Worker> w =
        SpawnWorker(group, dir, absl::StrCat("rank", r), r, args);
    ASSERT_TRUE(w.ok()) << w.status();
    workers.push_back(*w);
  }
  std::vector<Worker> waited_for;  // Survivors (and the replacement).
  for (const Worker& w : workers) {
    if (w.rank != kVictim) waited_for.push_back(w);
  }
  if (epoch2 == "replace") {
    // Joins epoch 2 in the victim's slot; it waits in the rendezvous until
    // the survivors arrive.
    absl::StatusOr<Worker> w = SpawnWorker(
        group, dir, "replacement", kVictim,
        {"--scenario=join", absl::StrCat("--size=", kWorld),
         absl::StrCat("--transport=", transport),
         absl::StrCat("--group=", comm_group), absl::StrCat("--store=", dir),
         "--epoch=1", "--connect_timeout_ms=60000"});
    ASSERT_TRUE(w.ok()) << w.status();
    waited_for.push_back(*w);
  }
  std::vector<pid_t> pids;
  for (const Worker& w : waited_for) pids.push_back(w.pid);
  const Worker& victim = workers[kVictim];

  const absl::Time start = absl::Now();
  const absl::Status waited = group.WaitForExit(pids, start + absl::Seconds(90),
                                                /*stop_on_failure=*/true);
  std::string logs;
  for (const Worker& w : workers) logs += w.Logs();
  ASSERT_TRUE(waited.ok())
      << label << ": a survivor hung or crashed: " << waited
      << (waited.message().find("signal 13") != absl::string_view::npos
              ? " (SIGPIPE: a write to the dead peer's socket killed the "
                "survivor; the communicator must not raise SIGPIPE: "
                "MSG_NOSIGNAL, or SIGPIPE ignored in the process)"
              : "")
      << "\n"
      << logs;

  // The victim died by SIGKILL, or is still stopped (then we kill it).
  if (signal == "kill") {
    ASSERT_TRUE(
        group.WaitForExit({victim.pid}, absl::Now() + absl::Seconds(10)).ok())
        << logs;
    absl::StatusOr<ChildExit> exit = group.ExitOf(victim.pid);
    ASSERT_TRUE(exit.ok());
    EXPECT_TRUE(exit->signaled && exit->signal == SIGKILL)
        << "victim: " << exit->ToString() << "\n"
        << victim.Logs();
  } else {
    EXPECT_TRUE(group.IsStopped(victim.pid)) << "victim is not stopped\n"
                                             << victim.Logs();
    group.KillAll();
  }
  if (op != "barrier") {
    EXPECT_NE(victim.Stdout().find("running; raising"), std::string::npos)
        << "the victim did not see its operation start\n"
        << victim.Logs();
  }

  for (const Worker& w : waited_for) {
    absl::StatusOr<ChildExit> exit = group.ExitOf(w.pid);
    ASSERT_TRUE(exit.ok());
    EXPECT_TRUE(exit->exited && exit->exit_code == 0)
        << label << " " << w.out_path << ": " << exit->ToString() << "\n"
        << w.Logs();
    const std::map<std::string, std::string> result = w.Result();
    EXPECT_EQ(Field(result, "epoch2"), "ok") << w.Logs();
    if (Field(result, "scenario") == "join") continue;
    const std::string status = Field(result, "status");
    EXPECT_TRUE(status == "UNAVAILABLE" || status == "DEADLINE_EXCEEDED")
        << label << " rank " << w.rank << " got " << status << "\n"
        << w.Logs();
    const int64_t elapsed = IntField(result, "elapsed_ms");
    EXPECT_GE(elapsed, 0) << w.Logs();
    if (transport == "shm" && signal == "kill" && op != "sendrecv") {
      // A dead peer is seen through its pidfd, not waited out. (Send and
      // Recv go over the inner Gloo communicator, as fast as Gloo's.)
      EXPECT_EQ(status, "UNAVAILABLE") << label << " rank " << w.rank << "\n"
                                       << w.Logs();
      EXPECT_LT(elapsed, kOpTimeoutMs) << label << " rank " << w.rank;
    }
    EXPECT_LT(elapsed, kOpTimeoutMs + kSlackMs)
        << label << " rank " << w.rank << ": error after " << elapsed << " ms\n"
        << w.Logs();
    EXPECT_NE(Field(result, "later_status"), "OK")
        << "a later operation succeeded on a failed communicator\n"
        << w.Logs();
    EXPECT_LT(IntField(result, "later_ms"), kOpTimeoutMs) << w.Logs();
    EXPECT_NE(Field(result, "async_error"), "OK") << w.Logs();
    EXPECT_LT(IntField(result, "destroy_ms"), kSlackMs)
        << "Abort + destruction took too long\n"
        << w.Logs();
    EXPECT_LE(IntField(result, "threads_after"),
              IntField(result, "threads_baseline"))
        << "threads leaked by the failed communicator\n"
        << w.Logs();
    std::cout << label << " rank " << w.rank << ": " << status << " after "
              << elapsed << " ms (later op " << Field(result, "later_status")
              << " in " << Field(result, "later_ms") << " ms, destroy "
              << Field(result, "destroy_ms") << " ms, threads "
              << Field(result, "threads_baseline") << "->"
              << Field(result, "threads_after") << ", epoch 2 size "
              << Field(result, "epoch2_size") << " in "
              << Field(result, "epoch2_ms") << " ms)" << std::endl;
  }
  // Every segment's name was unlinked once its ranks had mapped it, the
  // killed rank's included.
  const std::vector<std::string> left = ShmEntries(comm_group);
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left[0];
  std::cout << label << ": " << absl::ToDoubleSeconds(absl::Now() - start)
            << " s" << std::endl;
}

class CollectivesFaultTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CollectivesFaultTest, SurvivorsFailFastThenFormTheNextEpoch) {
  RunFault(std::get<0>(GetParam()), std::get<1>(GetParam()), "shrink");
}

INSTANTIATE_TEST_SUITE_P(
    EveryOperation, CollectivesFaultTest,
    ::testing::Combine(::testing::Values("allgather", "reducescatter",
                                         "allreduce", "broadcast", "barrier",
                                         "sendrecv"),
                       ::testing::Values("kill", "stop")),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

// The same faults with the shared-memory transport (ShmCollective): a
// killed peer is seen through its pidfd (UNAVAILABLE), a stopped one at
// the deadline.
class ShmCollectivesFaultTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ShmCollectivesFaultTest, SurvivorsFailFastThenFormTheNextEpoch) {
  RunFault(std::get<0>(GetParam()), std::get<1>(GetParam()), "shrink", "shm");
}

INSTANTIATE_TEST_SUITE_P(
    EveryOperation, ShmCollectivesFaultTest,
    ::testing::Combine(::testing::Values("allgather", "reducescatter",
                                         "allreduce", "broadcast", "barrier",
                                         "sendrecv"),
                       ::testing::Values("kill", "stop")),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

TEST(ShmCollectivesFaultReplaceTest, ReplacementJoinsTheNextEpoch) {
  RunFault("allreduce", "kill", "replace", "shm");
}

// A replacement process takes the dead rank's slot in epoch 2 (W stays 4).
TEST(CollectivesFaultReplaceTest, ReplacementJoinsTheNextEpoch) {
  RunFault("allreduce", "kill", "replace");
}

}  // namespace
}  // namespace shardd::testing
