// Multi-process correctness of the Gloo collectives: W real processes on
// 127.0.0.1 (W = 2, 3, 4, 8) rendezvous through a FileStore directory and
// run every operation over sizes from one element to 64 MiB, even and
// uneven counts (zeros included), fp32/bf16/fp16, sum and average; each
// worker checks its results against a reference it computes itself (see
// collective_worker.cc). A determinism test runs the same random reductions
// twice, once with each reduce-scatter algorithm, and compares the bits.
// The Shm* tests run the same with --transport=shm (ShmCollective) and
// compare its random reductions with Gloo's, bit for bit.
#include <stdlib.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/collectives/process_group.h"
#include "tests/collectives/worker_driver.h"

namespace shardd::testing {
namespace {

// Spawns W workers with `args`, waits for all of them (deadline), asserts
// that each exited 0 with a RESULT line reporting no failed check, and
// returns the RESULT lines by rank.
std::vector<std::map<std::string, std::string>> RunWorld(
    int world, const std::string& label, std::vector<std::string> args,
    absl::Duration deadline) {
  std::vector<std::map<std::string, std::string>> results(world);
  const std::string dir = MakeTempDir(label);
  EXPECT_FALSE(dir.empty());
  if (dir.empty()) return results;
  args.push_back(absl::StrCat("--size=", world));
  args.push_back(absl::StrCat("--store=", dir));
  ProcessGroup group;  // Kills and reaps everything on every exit path.
  std::vector<Worker> workers;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<Worker> w =
        SpawnWorker(group, dir, absl::StrCat("rank", r), r, args);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return results;
    workers.push_back(*w);
    pids.push_back(w->pid);
  }
  const absl::Time start = absl::Now();
  const absl::Status waited = group.WaitForExit(pids, start + deadline,
                                                /*stop_on_failure=*/true);
  std::string logs;
  for (const Worker& w : workers) logs += w.Logs();
  EXPECT_TRUE(waited.ok()) << label << ": " << waited << "\n" << logs;
  for (const Worker& w : workers) {
    absl::StatusOr<ChildExit> exit = group.ExitOf(w.pid);
    if (!exit.ok()) continue;  // Already reported as still running.
    // (Every log was printed above when the wait failed.)
    const std::string w_logs = waited.ok() ? w.Logs() : "";
    EXPECT_TRUE(exit->exited && exit->exit_code == 0)
        << label << " rank " << w.rank << ": " << exit->ToString() << "\n"
        << w_logs;
    results[w.rank] = w.Result();
    EXPECT_EQ(results[w.rank]["failures"], "0")
        << label << " rank " << w.rank << "\n"
        << w_logs;
  }
  std::cout << label << ": " << absl::ToDoubleSeconds(absl::Now() - start)
            << " s, rank 0: checks=" << results[0]["checks"]
            << " connect_ms=" << results[0]["connect_ms"] << std::endl;
  return results;
}

std::vector<std::string> CorrectnessArgs(const std::string& sizes,
                                         const std::string& fp32_sizes) {
  std::vector<std::string> args = {
      "--scenario=correctness",  "--seed=12345",
      "--op_timeout_ms=120000",  "--connect_timeout_ms=60000",
      "--dtypes=fp32,bf16,fp16", absl::StrCat("--sizes=", sizes)};
  if (!fp32_sizes.empty()) {
    args.push_back(absl::StrCat("--fp32_sizes=", fp32_sizes));
  }
  return args;
}

// 1 element, odd sizes, 1 MiB per dtype; 64 MiB (fp32) where it says so.
TEST(CollectivesCorrectnessTest, TwoProcesses) {
  RunWorld(2, "correctness_w2", CorrectnessArgs("1,7,1001,1MiB", "64MiB"),
           absl::Seconds(200));
}

TEST(CollectivesCorrectnessTest, ThreeProcesses) {
  RunWorld(3, "correctness_w3", CorrectnessArgs("1,7,1001,1MiB", ""),
           absl::Seconds(200));
}

TEST(CollectivesCorrectnessTest, FourProcesses) {
  RunWorld(4, "correctness_w4", CorrectnessArgs("1,7,1001,1MiB", "64MiB"),
           absl::Seconds(300));
}

// 8 processes on 2 cores: up to 1 MiB only.
TEST(CollectivesCorrectnessTest, EightProcesses) {
  RunWorld(8, "correctness_w8", CorrectnessArgs("1,7,1001,64KiB,1MiB", ""),
           absl::Seconds(200));
}

// Random (order-dependent) reductions: two runs give the same bits on every
// rank, and every rank's all-reduce result is the same.
void ExpectDeterministic(int world) {
  const std::vector<std::string> args = {
      "--scenario=determinism", "--seed=777", "--op_timeout_ms=120000",
      "--dtypes=fp32,bf16,fp16", "--sizes=7,1001,100003"};
  const std::string label = absl::StrCat("determinism_w", world);
  // The two runs also use the two reduce-scatter algorithms (the workers
  // inherit the environment): direct and ring must give the same bits.
  setenv("SHARDD_REDUCE_SCATTER", "direct", 1);
  const auto first = RunWorld(world, label + "_run1", args, absl::Seconds(120));
  setenv("SHARDD_REDUCE_SCATTER", "ring", 1);
  const auto second =
      RunWorld(world, label + "_run2", args, absl::Seconds(120));
  unsetenv("SHARDD_REDUCE_SCATTER");
  for (int r = 0; r < world; ++r) {
    ASSERT_FALSE(first[r].count("hash") == 0 || second[r].count("hash") == 0)
        << "rank " << r << " reported no hash";
    EXPECT_EQ(first[r].at("hash"), second[r].at("hash")) << "rank " << r;
    EXPECT_EQ(first[r].at("allreduce_hash"), first[0].at("allreduce_hash"))
        << "all-reduce results differ between rank " << r << " and rank 0";
  }
}

// At W = 2 an all-reduce is one exchange up to 1 MiB and fused above
// (ChooseAllReduceAlgorithm); each forced at every size, and forced back to
// a reduce-scatter and an all-gather (SHARDD_ALL_REDUCE=exchange, fused,
// split), it must give the same bits on every rank. 1000003 elements: past
// the exchange's limit, halves of several 1 MiB segments in fp32.
TEST(CollectivesDeterminismTest, TwoProcessesEveryAllReduceGivesTheSameBits) {
  const std::vector<std::string> args = {
      "--scenario=determinism", "--seed=2026", "--op_timeout_ms=120000",
      "--dtypes=fp32,bf16,fp16", "--sizes=1,7,1001,1000003"};
  const auto chosen =
      RunWorld(2, "allreduce_default_w2", args, absl::Seconds(120));
  for (const char* forced : {"exchange", "fused", "split"}) {
    setenv("SHARDD_ALL_REDUCE", forced, 1);
    const auto other = RunWorld(2, absl::StrCat("allreduce_", forced, "_w2"),
                                args, absl::Seconds(120));
    unsetenv("SHARDD_ALL_REDUCE");
    for (int r = 0; r < 2; ++r) {
      ASSERT_FALSE(chosen[r].count("allreduce_hash") == 0 ||
                   other[r].count("allreduce_hash") == 0)
          << "rank " << r << " reported no hash (" << forced << ")";
      EXPECT_EQ(chosen[r].at("allreduce_hash"), other[r].at("allreduce_hash"))
          << "rank " << r << ", " << forced << " against the default";
      EXPECT_EQ(chosen[r].at("allreduce_hash"), chosen[0].at("allreduce_hash"))
          << "all-reduce results differ between rank " << r << " and rank 0";
    }
  }
}

TEST(CollectivesDeterminismTest, ThreeProcesses) { ExpectDeterministic(3); }
TEST(CollectivesDeterminismTest, FourProcesses) { ExpectDeterministic(4); }

// The shared-memory transport (ShmCollective) passes the same checks; 16
// MiB is 16 of its 1 MiB slots.
std::vector<std::string> ShmArgs(std::vector<std::string> args) {
  args.push_back("--transport=shm");
  return args;
}

TEST(ShmCollectivesCorrectnessTest, TwoProcesses) {
  RunWorld(2, "shm_correctness_w2",
           ShmArgs(CorrectnessArgs("1,7,1001,1MiB", "16MiB")),
           absl::Seconds(200));
}

TEST(ShmCollectivesCorrectnessTest, ThreeProcesses) {
  RunWorld(3, "shm_correctness_w3",
           ShmArgs(CorrectnessArgs("1,7,1001,1MiB", "")), absl::Seconds(200));
}

TEST(ShmCollectivesCorrectnessTest, FourProcesses) {
  RunWorld(4, "shm_correctness_w4",
           ShmArgs(CorrectnessArgs("1,7,1001,1MiB", "16MiB")),
           absl::Seconds(300));
}

// Random (order-dependent) reductions in real processes: the shared-memory
// transport gives Gloo's bits on every rank (at W = 4 in Gloo's tree order,
// at W = 2 and 3 in its ring order; blocks large enough for Gloo's ring
// algorithm are compared in //daemon/comm:shm_collective_test).
void ExpectSameBitsAsGloo(int world) {
  const std::vector<std::string> args = {
      "--scenario=determinism", "--seed=4242", "--op_timeout_ms=120000",
      "--dtypes=fp32,bf16,fp16", "--sizes=7,1001,100003"};
  const std::string label = absl::StrCat("shm_vs_gloo_w", world);
  const auto gloo = RunWorld(world, label + "_gloo", args, absl::Seconds(120));
  const auto shm =
      RunWorld(world, label + "_shm", ShmArgs(args), absl::Seconds(120));
  for (int r = 0; r < world; ++r) {
    ASSERT_FALSE(gloo[r].count("hash") == 0 || shm[r].count("hash") == 0)
        << "rank " << r << " reported no hash";
    EXPECT_EQ(shm[r].at("hash"), gloo[r].at("hash")) << "rank " << r;
  }
}

TEST(ShmCollectivesDeterminismTest, TwoProcessesGiveGloosBits) {
  ExpectSameBitsAsGloo(2);
}
TEST(ShmCollectivesDeterminismTest, ThreeProcessesGiveGloosBits) {
  ExpectSameBitsAsGloo(3);
}
TEST(ShmCollectivesDeterminismTest, FourProcessesGiveGloosBits) {
  ExpectSameBitsAsGloo(4);
}

}  // namespace
}  // namespace shardd::testing
