#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/gloo_collective.h"
#include "daemon/comm/host_collective.h"
#include "daemon/comm/host_transport.h"
#include "daemon/comm/in_memory_store.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

using core::DType;
using Comms = std::vector<std::unique_ptr<Collective>>;

// Small slots, so that every test message spans many chunks.
constexpr int64_t kSlotBytes = int64_t{64} << 10;

void ForEachRank(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

// A group name no other test process uses, so that /dev/shm can be
// checked for this test's segments alone.
std::string UniqueGroup(absl::string_view what) {
  static std::atomic<int> counter{0};
  return absl::StrCat(what, "-", ::getpid(), "-", counter++);
}

GlooCollectiveOptions GlooOptions(int rank, int world, const std::string& group,
                                  absl::Duration op_timeout) {
  GlooCollectiveOptions options;
  options.rank = rank;
  options.size = world;
  options.epoch = 1;
  options.group = group;
  options.connect_timeout = absl::Seconds(30);
  options.default_op_timeout = op_timeout;
  return options;
}

struct Formed {
  Comms comms;
  std::vector<absl::Status> errors;
  std::vector<HostTransport> chosen;
};

Formed FormHost(int world, const std::string& group, TransportMode mode,
                absl::Duration op_timeout = absl::Seconds(30),
                int refusing_rank = -1, std::vector<int> job_ranks = {}) {
  InMemoryStore store;
  Formed formed;
  formed.comms.resize(world);
  formed.errors.resize(world);
  formed.chosen.resize(world, HostTransport::kTcp);
  ForEachRank(world, [&](int r) {
    HostCollectiveOptions options;
    options.gloo = GlooOptions(r, world, group, op_timeout);
    options.gloo.job_ranks = job_ranks;
    options.transport = mode;
    options.slot_bytes = kSlotBytes;
    options.refuse_mapping_for_testing = r == refusing_rank;
    auto comm = CreateHostCollective(options, store, &formed.chosen[r]);
    if (comm.ok()) {
      formed.comms[r] = std::move(*comm);
    } else {
      formed.errors[r] = comm.status();
    }
  });
  return formed;
}

Comms FormShm(int world, absl::Duration op_timeout = absl::Seconds(30)) {
  Formed formed =
      FormHost(world, UniqueGroup("shm"), TransportMode::kShm, op_timeout);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(formed.errors[r].ok()) << formed.errors[r];
    EXPECT_EQ(formed.chosen[r], HostTransport::kShm);
  }
  return std::move(formed.comms);
}

Comms FormGloo(int world) {
  InMemoryStore store;
  Comms comms(world);
  const std::string group = UniqueGroup("gloo");
  ForEachRank(world, [&](int r) {
    auto comm = CreateGlooCollective(
        GlooOptions(r, world, group, absl::Seconds(30)), store);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comms[r] = std::move(*comm);
  });
  return comms;
}

// The names in /dev/shm that contain `token`.
std::vector<std::string> ShmEntries(absl::string_view token) {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (dirent* entry = ::readdir(dir)) {
    if (absl::StrContains(entry->d_name, token)) {
      names.push_back(entry->d_name);
    }
  }
  ::closedir(dir);
  return names;
}

// Random elements of `dtype` (finite, in [-1, 1)), as bytes.
std::vector<uint8_t> RandomBytes(DType dtype, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t es = core::DTypeSize(dtype);
  std::vector<uint8_t> bytes(std::max<int64_t>(1, n * es));
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      const uint16_t h = dtype == DType::kBFloat16 ? core::FloatToBFloat16(v)
                                                   : core::FloatToHalf(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Runs `op` on every rank of `comms` (one thread each) and expects OK.
void RunAll(Comms& comms,
            const std::function<std::shared_ptr<Work>(int, Collective&)>& op,
            const std::string& what) {
  ForEachRank(static_cast<int>(comms.size()), [&](int r) {
    absl::Status status = op(r, *comms[r])->Wait();
    EXPECT_TRUE(status.ok()) << what << " rank " << r << ": " << status;
  });
}

// Count vectors that exercise equal, uneven-with-zeros, many-chunk, and
// ring-sized (> 2 MiB per block, GlooCollective's ring) reductions; with
// W = 4 the small ones go by halving.
std::vector<std::vector<int64_t>> CountPatterns(int world) {
  std::vector<std::vector<int64_t>> patterns(4, std::vector<int64_t>(world));
  for (int r = 0; r < world; ++r) {
    patterns[0][r] = 37;
    patterns[1][r] = r % 2 == 1 ? 0 : 11 + 5 * r;
    patterns[2][r] = 40000 + 1234 * r;
    patterns[3][r] = r == 0 ? 0 : 600000 + 7 * r;
  }
  return patterns;
}

class ShmCollectiveBitExactTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmCollectiveBitExactTest, EveryOpAndDtypeGivesGloosBits) {
  const int world = GetParam();
  Comms gloo = FormGloo(world);
  Comms shm = FormShm(world);
  ASSERT_EQ(gloo.size(), shm.size());
  uint64_t seed = 100;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const int64_t es = core::DTypeSize(dtype);
    for (const std::vector<int64_t>& counts : CountPatterns(world)) {
      const int64_t total = Sum(counts);
      const std::string tag = absl::StrCat(core::DTypeName(dtype), " W=", world,
                                           " counts[1]=", counts[1]);
      ++seed;
      std::vector<std::vector<uint8_t>> inputs(world);
      for (int r = 0; r < world; ++r) {
        inputs[r] = RandomBytes(dtype, total, seed * 16 + r);
      }
      // Reduce-scatter, sum and average.
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        std::vector<std::vector<uint8_t>> want(world), got(world);
        for (int r = 0; r < world; ++r) {
          want[r].assign(std::max<int64_t>(1, counts[r] * es), 0);
          got[r].assign(std::max<int64_t>(1, counts[r] * es), 0);
        }
        RunAll(
            gloo,
            [&](int r, Collective& c) {
              return c.ReduceScatter(inputs[r].data(), want[r].data(), counts,
                                     dtype, op);
            },
            "gloo reducescatter " + tag);
        RunAll(
            shm,
            [&](int r, Collective& c) {
              return c.ReduceScatter(inputs[r].data(), got[r].data(), counts,
                                     dtype, op);
            },
            "shm reducescatter " + tag);
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(got[r], want[r])
              << "reducescatter " << tag << " rank " << r
              << (op == ReduceOp::kSum ? " sum" : " avg");
        }
        // All-reduce of the whole input, in place.
        std::vector<std::vector<uint8_t>> want_all = inputs, got_all = inputs;
        RunAll(
            gloo,
            [&](int r, Collective& c) {
              return c.AllReduce(want_all[r].data(), total, dtype, op);
            },
            "gloo allreduce " + tag);
        RunAll(
            shm,
            [&](int r, Collective& c) {
              return c.AllReduce(got_all[r].data(), total, dtype, op);
            },
            "shm allreduce " + tag);
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(got_all[r], want_all[r])
              << "allreduce " << tag << " rank " << r;
        }
      }
      // All-gather: every rank's part of its own input; output over 0xee.
      std::vector<std::vector<uint8_t>> gathered(
          world, std::vector<uint8_t>(std::max<int64_t>(1, total * es), 0xee));
      RunAll(
          shm,
          [&](int r, Collective& c) {
            int64_t offset = 0;
            for (int q = 0; q < r; ++q) offset += counts[q];
            return c.AllGather(inputs[r].data() + offset * es,
                               gathered[r].data(), counts, dtype);
          },
          "shm allgather " + tag);
      for (int r = 0; r < world; ++r) {
        int64_t offset = 0;
        for (int q = 0; q < world; ++q) {
          EXPECT_EQ(0,
                    std::memcmp(gathered[r].data() + offset * es,
                                inputs[q].data() + offset * es, counts[q] * es))
              << "allgather " << tag << " rank " << r << " part " << q;
          offset += counts[q];
        }
      }
      // Broadcast from the last rank.
      std::vector<std::vector<uint8_t>> cast = inputs;
      RunAll(
          shm,
          [&](int r, Collective& c) {
            return c.Broadcast(cast[r].data(), total, dtype, world - 1);
          },
          "shm broadcast " + tag);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(cast[r], inputs[world - 1]) << "broadcast " << tag;
      }
    }
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(shm[r]->AsyncError().ok()) << shm[r]->AsyncError();
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmCollectiveBitExactTest,
                         ::testing::Values(2, 3, 4));

TEST(ShmCollectiveTest, StatsCountBytesAsGlooDoes) {
  Comms shm = FormShm(2);
  std::vector<std::vector<float>> out(2, std::vector<float>(6));
  std::vector<std::vector<float>> in(2, std::vector<float>(3, 1.0f));
  RunAll(
      shm,
      [&](int r, Collective& c) {
        return c.AllGather(in[r].data(), out[r].data(), {3, 3},
                           DType::kFloat32);
      },
      "allgather");
  RunAll(
      shm,
      [&](int r, Collective& c) {
        return c.AllReduce(out[r].data(), 6, DType::kFloat32, ReduceOp::kSum);
      },
      "allreduce");
  const CollectiveStats stats = shm[0]->Stats();
  EXPECT_EQ(stats.of(OpKind::kAllGather).calls, 1);
  EXPECT_EQ(stats.of(OpKind::kAllGather).bytes, 24);
  EXPECT_EQ(stats.of(OpKind::kAllReduce).bytes, 24);
  EXPECT_EQ(out[0], std::vector<float>(6, 2.0f));
}

TEST(ShmCollectiveTest, SendRecvAndBarrierWork) {
  Comms shm = FormShm(3);
  std::vector<std::vector<uint8_t>> data(3, std::vector<uint8_t>(300000));
  for (size_t i = 0; i < data[0].size(); ++i) data[0][i] = i * 7;
  ForEachRank(3, [&](int r) {
    if (r == 0) {
      EXPECT_TRUE(shm[0]->Send(data[0].data(), 100000, 2, 5)->Wait().ok());
      EXPECT_TRUE(
          shm[0]->Send(data[0].data() + 100000, 200000, 2, 5)->Wait().ok());
    } else if (r == 2) {
      auto first = shm[2]->Recv(data[2].data(), 100000, 0, 5);
      auto second = shm[2]->Recv(data[2].data() + 100000, 200000, 0, 5);
      EXPECT_TRUE(first->Wait().ok());
      EXPECT_TRUE(second->Wait().ok());
    }
    EXPECT_TRUE(shm[r]->Barrier()->Wait().ok());
  });
  EXPECT_EQ(data[2], data[0]);
  EXPECT_EQ(shm[2]->Stats().of(OpKind::kRecv).bytes, 300000);
  EXPECT_EQ(shm[1]->Stats().of(OpKind::kBarrier).calls, 1);
}

TEST(ShmCollectiveTest, InvalidArgumentsDoNotPoisonTheCommunicator) {
  Comms shm = FormShm(2);
  float x[4] = {1, 2, 3, 4};
  float y[8] = {};
  const absl::Status bad_counts =
      shm[0]->AllGather(x, y, {4}, DType::kFloat32)->Wait();
  EXPECT_EQ(bad_counts.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_counts.message().find("counts"), absl::string_view::npos);
  EXPECT_EQ(shm[1]->Send(x, 4, 1, 0)->Wait().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shm[0]
                ->AllReduce(x, 4, static_cast<DType>(99), ReduceOp::kSum)
                ->Wait()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(shm[0]->AsyncError().ok());
  std::vector<std::vector<float>> v(2, std::vector<float>{1, 2, 3});
  RunAll(
      shm,
      [&](int r, Collective& c) {
        return c.AllReduce(v[r].data(), 3, DType::kFloat32, ReduceOp::kSum);
      },
      "allreduce after invalid arguments");
  EXPECT_EQ(v[1], (std::vector<float>{2, 4, 6}));
}

TEST(ShmCollectiveTest, DeadlineWhenAPeerNeverIssuesThenEveryOpFails) {
  Comms shm = FormShm(2, absl::Milliseconds(300));
  std::vector<float> out(8);
  std::vector<float> in(4, 1.0f);
  const MonoTime start = MonoNow();
  const absl::Status status =
      shm[0]->AllGather(in.data(), out.data(), {4, 4}, DType::kFloat32)->Wait();
  const absl::Duration took = MonoNow() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_EQ(shm[0]->AsyncError().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(shm[0]->Barrier()->Wait().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The peer learns at once through the poisoned segment.
  const MonoTime peer_start = MonoNow();
  const absl::Status peer = shm[1]->Barrier()->Wait();
  EXPECT_EQ(peer.code(), absl::StatusCode::kUnavailable) << peer;
  EXPECT_NE(peer.message().find("rank 0"), absl::string_view::npos) << peer;
  EXPECT_LT(MonoNow() - peer_start, absl::Milliseconds(250));
}

// "rank 1 did not reach round 0" counts group ranks; the context names the
// job rank of each, so that an operator finds the straggling daemon.
TEST(ShmCollectiveTest, ErrorsNameTheJobRanksOfTheGroup) {
  Formed formed = FormHost(2, UniqueGroup("shm"), TransportMode::kShm,
                           absl::Milliseconds(300), -1, {5, 9});
  ASSERT_TRUE(formed.errors[0].ok()) << formed.errors[0];
  std::vector<float> out(8);
  std::vector<float> in(4, 1.0f);
  const absl::Status status =
      formed.comms[0]
          ->AllGather(in.data(), out.data(), {4, 4}, DType::kFloat32)
          ->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("rank 0/2 (shm, job ranks [5, 9]): rank 1 "
                                  "did not reach round 0"),
            absl::string_view::npos)
      << status;
}

TEST(ShmCollectiveTest, AbortWhileWaitingOnAPeerReturnsPromptly) {
  Comms shm = FormShm(2, absl::Seconds(60));
  std::vector<float> big(1 << 20, 1.0f);
  std::shared_ptr<Work> work = shm[0]->AllReduce(
      big.data(), big.size(), DType::kFloat32, ReduceOp::kSum);
  // Running (counted) and waiting on rank 1, which never issues it.
  while (shm[0]->Stats().of(OpKind::kAllReduce).calls == 0) {
    std::this_thread::yield();
  }
  const MonoTime start = MonoNow();
  shm[0]->Abort("test");
  shm[0]->Abort("again");  // Idempotent.
  const absl::Status status = work->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_NE(status.message().find("test"), absl::string_view::npos);
  EXPECT_LT(MonoNow() - start, absl::Milliseconds(500));
  EXPECT_EQ(shm[0]->Barrier()->Wait().code(), absl::StatusCode::kAborted);
  const absl::Status peer = shm[1]->Barrier()->Wait();
  EXPECT_EQ(peer.code(), absl::StatusCode::kUnavailable) << peer;
}

TEST(ShmCollectiveTest, NoSegmentNameOutlivesTheFormation) {
  const std::string group = UniqueGroup("leftover");
  {
    Formed formed = FormHost(3, group, TransportMode::kShm);
    for (const absl::Status& e : formed.errors) ASSERT_TRUE(e.ok()) << e;
    EXPECT_TRUE(ShmEntries(group).empty())
        << "the name must be unlinked once every rank has mapped it: "
        << ShmEntries(group)[0];
    Comms& shm = formed.comms;
    RunAll(
        shm, [](int, Collective& c) { return c.Barrier(); }, "barrier");
  }
  EXPECT_TRUE(ShmEntries(group).empty());
}

TEST(ShmCollectiveTest, AutoChoosesSharedMemoryOnOneHost) {
  Formed formed = FormHost(2, UniqueGroup("auto"), TransportMode::kAuto);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(formed.errors[r].ok()) << formed.errors[r];
    EXPECT_EQ(formed.chosen[r], HostTransport::kShm);
  }
}

TEST(ShmCollectiveTest, OneRankThatCannotMapSendsEveryRankToGloo) {
  const std::string group = UniqueGroup("refuse");
  Formed formed = FormHost(3, group, TransportMode::kAuto, absl::Seconds(30),
                           /*refusing_rank=*/1);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(formed.errors[r].ok()) << formed.errors[r];
    EXPECT_EQ(formed.chosen[r], HostTransport::kTcp) << "rank " << r;
  }
  std::vector<std::vector<float>> v(3, std::vector<float>{1, 2});
  RunAll(
      formed.comms,
      [&](int r, Collective& c) {
        return c.AllReduce(v[r].data(), 2, DType::kFloat32, ReduceOp::kSum);
      },
      "allreduce over the fallback");
  EXPECT_EQ(v[2], (std::vector<float>{3, 6}));
  EXPECT_TRUE(ShmEntries(group).empty());
}

TEST(ShmCollectiveTest, RequiredShmFailsOnEveryRankWhenOneCannotMap) {
  Formed formed = FormHost(2, UniqueGroup("required"), TransportMode::kShm,
                           absl::Seconds(30), /*refusing_rank=*/0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(formed.errors[r].code(), absl::StatusCode::kFailedPrecondition)
        << "rank " << r << ": " << formed.errors[r];
    EXPECT_NE(formed.errors[r].message().find("rank 0"),
              absl::string_view::npos);
  }
}

}  // namespace
}  // namespace shardd::comm
