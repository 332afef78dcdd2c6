// Needs a GPU: tagged "gpu" and built only with --config=cuda. Run with
//   bazel test --config=cuda --test_tag_filters=gpu //daemon/comm/nccl/...
//
// Two ranks in two forked processes, rendezvous through a directory store.
// Rank r uses GPU r % device_count. NCCL refuses two ranks of one
// communicator on one GPU ("Duplicate GPU detected", FAILED_PRECONDITION
// here), so on a one-GPU machine every test here is skipped with that
// message; with two or more GPUs they run.
//
// The parent never touches CUDA (a forked child cannot use a CUDA context
// its parent created); each child reports through its exit status: 0 pass,
// kSkip when NCCL refused the configuration, anything else a failure
// (described on stderr).
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/comm/nccl/nccl_collective.h"
#include "daemon/comm/nccl/test_stores.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

constexpr int kSkip = 77;
constexpr int kFail = 1;

#define CHILD_CHECK(cond)                                                \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "rank check failed at %s:%d: %s\n", __FILE__, \
                   __LINE__, #cond);                                     \
      return kFail;                                                      \
    }                                                                    \
  } while (0)

using RankBody = std::function<int(int rank, Collective& comm)>;

// In a child: makes rank `rank`'s communicator and runs `body`.
int RunRank(int rank, int size, const std::string& dir, int64_t epoch,
            const RankBody& body) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "rank %d: no GPU\n", rank);
    return kFail;
  }
  testing::DirStore store(dir);
  NcclCollectiveOptions options;
  options.rank = rank;
  options.size = size;
  options.epoch = epoch;
  options.group = "pair";
  options.cuda_device = rank % devices;
  options.connect_timeout = absl::Seconds(30);
  options.default_op_timeout = absl::Seconds(30);
  auto made = CreateNcclCollective(options, store);
  if (!made.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 made.status().ToString().c_str());
    return made.status().code() == absl::StatusCode::kFailedPrecondition
               ? kSkip
               : kFail;
  }
  return body(rank, **made);
}

// Forks `size` ranks; returns their exit statuses (-1: killed after the
// deadline). Children still running when rank 0 has finished and `grace`
// has passed are killed: a hung rank must not hang the test.
std::vector<int> RunRanks(int size, const RankBody& body,
                          absl::Duration grace = absl::Seconds(60)) {
  char dir_template[] = "/tmp/nccl_mp_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  EXPECT_NE(dir, nullptr);
  static int64_t epoch = 0;
  ++epoch;
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(RunRank(r, size, dir, epoch, body));
    pids.push_back(pid);
  }
  std::vector<int> codes(size, -1);
  std::vector<bool> done(size, false);
  const MonoTime hard_deadline = MonoNow() + absl::Seconds(120);
  MonoTime kill_at = MonoTime::InfiniteFuture();
  int left = size;
  while (left > 0) {
    for (int r = 0; r < size; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (r == 0) kill_at = MonoNow() + grace;
      }
    }
    if (left > 0 && (MonoNow() > kill_at || MonoNow() > hard_deadline)) {
      for (int r = 0; r < size; ++r) {
        if (!done[r]) kill(pids[r], SIGKILL);
      }
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return codes;
}

bool Skipped(const std::vector<int>& codes) {
  for (int c : codes) {
    if (c == kSkip) return true;
  }
  return false;
}

constexpr char kSkipMessage[] =
    "NCCL refused two ranks on this machine's GPUs (with one GPU: "
    "\"Duplicate GPU detected\"); these tests need two GPUs";

template <typename T>
bool CopyIn(void* device, const std::vector<T>& host) {
  // From pageable memory the copy may return before the bytes land, and
  // the communicator's stream is non-blocking: wait for the device.
  return cudaMemcpy(device, host.data(), host.size() * sizeof(T),
                    cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
}

template <typename T>
std::vector<T> CopyOut(const void* device, size_t n) {
  std::vector<T> host(n);
  cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

TEST(NcclMultiProcessTest, UnevenGatherAndReduceScatterAcrossTwoRanks) {
  const std::vector<int> codes = RunRanks(2, [](int rank, Collective& comm) {
    const std::vector<int64_t> counts = {3, 5};
    void* in = nullptr;
    void* out = nullptr;
    CHILD_CHECK(cudaMalloc(&in, 64) == cudaSuccess);
    CHILD_CHECK(cudaMalloc(&out, 64) == cudaSuccess);
    // Uneven all-gather: grouped broadcasts.
    std::vector<float> mine(counts[rank]);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = 100.0f * rank + i;
    CHILD_CHECK(CopyIn(in, mine));
    CHILD_CHECK(
        comm.AllGather(in, out, counts, core::DType::kFloat32)->Wait().ok());
    const std::vector<float> want = {0, 1, 2, 100, 101, 102, 103, 104};
    CHILD_CHECK(CopyOut<float>(out, 8) == want);

    // Uneven bf16 reduce-scatter (average): rank r holds (r + 1) * x.
    std::vector<uint16_t> input(8);
    for (int i = 0; i < 8; ++i) {
      input[i] = core::FloatToBFloat16(static_cast<float>((rank + 1) * i));
    }
    CHILD_CHECK(CopyIn(in, input));
    CHILD_CHECK(comm.ReduceScatter(in, out, counts, core::DType::kBFloat16,
                                   ReduceOp::kAverage)
                    ->Wait()
                    .ok());
    const auto got = CopyOut<uint16_t>(out, counts[rank]);
    const int64_t offset = rank == 0 ? 0 : 3;
    for (int64_t i = 0; i < counts[rank]; ++i) {
      const float expect = 3.0f * static_cast<float>(offset + i) / 2.0f;
      CHILD_CHECK(got[i] == core::FloatToBFloat16(expect));
    }
    CHILD_CHECK(comm.Barrier()->Wait().ok());
    cudaFree(in);
    cudaFree(out);
    return 0;
  });
  if (Skipped(codes)) GTEST_SKIP() << kSkipMessage;
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Rank 1 leaves (or hangs) after the first barrier; rank 0's next operation
// must fail within its deadline, fail later operations at once, and its
// communicator must be destroyed without hanging.
int SurvivorBody(Collective& comm) {
  CHILD_CHECK(comm.Barrier()->Wait().ok());
  void* buf = nullptr;
  CHILD_CHECK(cudaMalloc(&buf, 4096) == cudaSuccess);
  OpOptions options;
  options.timeout = absl::Seconds(3);
  const MonoTime start = MonoNow();
  const absl::Status status =
      comm.AllReduce(buf, 1024, core::DType::kFloat32, ReduceOp::kSum, options)
          ->Wait();
  const absl::Duration took = MonoNow() - start;
  std::fprintf(stderr, "survivor: %s after %s\n", status.ToString().c_str(),
               absl::FormatDuration(took).c_str());
  CHILD_CHECK(status.code() == absl::StatusCode::kUnavailable ||
              status.code() == absl::StatusCode::kDeadlineExceeded);
  CHILD_CHECK(took < absl::Seconds(3) + absl::Seconds(3));
  CHILD_CHECK(comm.AsyncError() == status);
  const MonoTime again = MonoNow();
  CHILD_CHECK(comm.Barrier()->Wait() == status);
  CHILD_CHECK(MonoNow() - again < absl::Seconds(1));
  CHILD_CHECK(comm.Stats().of(OpKind::kAllReduce).failures == 1);
  return 0;
}

TEST(NcclMultiProcessTest, SurvivorOfADeadPeerFailsWithinTheDeadline) {
  const std::vector<int> codes = RunRanks(2, [](int rank, Collective& comm) {
    if (rank == 1) {
      if (!comm.Barrier()->Wait().ok()) return kFail;
      _exit(0);  // dies without a word to NCCL
    }
    return SurvivorBody(comm);
  });
  if (Skipped(codes)) GTEST_SKIP() << kSkipMessage;
  EXPECT_EQ(codes[0], 0);
}

TEST(NcclMultiProcessTest, SurvivorOfAHungPeerFailsWithDeadlineExceeded) {
  const std::vector<int> codes = RunRanks(
      2,
      [](int rank, Collective& comm) {
        if (rank == 1) {
          if (!comm.Barrier()->Wait().ok()) return kFail;
          absl::SleepFor(absl::Seconds(60));  // hung: killed by the parent
          return 0;
        }
        return SurvivorBody(comm);
      },
      /*grace=*/absl::Seconds(1));
  if (Skipped(codes)) GTEST_SKIP() << kSkipMessage;
  EXPECT_EQ(codes[0], 0);
}

}  // namespace
}  // namespace shardd::comm::nccl
