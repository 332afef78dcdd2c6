#include "daemon/comm/gloo_collective.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/gloo_test_group.h"
#include "daemon/comm/in_memory_store.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

using core::DType;

using testing::Comms;
using testing::ForEachRank;

// The 30 s defaults of every test here.
GlooCollectiveOptions Options(int rank, int world) {
  return testing::GroupOptions(rank, world);
}

Comms Connect(int world, absl::Duration op_timeout = absl::Seconds(30)) {
  return testing::ConnectGroup(world, op_timeout);
}

// Element encoding helpers: a buffer of `n` elements of `dtype` as bytes.
std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values) {
  const int64_t size = core::DTypeSize(dtype);
  std::vector<uint8_t> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kFloat32) {
      std::memcpy(&bytes[i * 4], &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBFloat16
                             ? core::FloatToBFloat16(values[i])
                             : core::FloatToHalf(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

// Small integers: sums over <= 4 ranks are exact in fp32, bf16 and fp16,
// so the reference does not depend on the order of addition.
std::vector<float> IntegerValues(int64_t n, int seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(((seed * 7 + i * 3) % 17) - 8);
  }
  return v;
}

std::vector<int64_t> CountsFor(int world, int pattern) {
  std::vector<int64_t> counts(world);
  for (int r = 0; r < world; ++r) {
    switch (pattern) {
      case 0:  // Equal.
        counts[r] = 37;
        break;
      case 1:  // Uneven, with zero counts when world > 1.
        counts[r] = (r % 2 == 1) ? 0 : 11 + 5 * r;
        break;
      case 2:  // Large enough for several 1 MiB ring segments.
        counts[r] = 300000 + 12345 * r;
        break;
      default:  // fp32 parts over 2 MiB: all-gather takes Gloo's ring at
                // W > 2 (ChooseAllGatherAlgorithm), direct below.
        counts[r] = (int64_t{2} << 20) / 4 + 1000 + 7 * r;
        break;
    }
  }
  return counts;
}

std::vector<DType> AllDTypes() {
  return {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
}

class GlooCollectiveTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectiveTest, AllGatherMatchesConcatenationForEveryDtypeAndCount) {
  const int world = GetParam();
  Comms comms = Connect(world);
  for (DType dtype : AllDTypes()) {
    // Patterns 0-2 run the direct exchange; 3's fp32 parts Gloo's ring.
    for (int pattern = 0; pattern < 4; ++pattern) {
      const std::vector<int64_t> counts = CountsFor(world, pattern);
      std::vector<uint8_t> expected;
      std::vector<std::vector<uint8_t>> inputs(world);
      for (int r = 0; r < world; ++r) {
        inputs[r] = Encode(dtype, IntegerValues(counts[r], r + 1));
        expected.insert(expected.end(), inputs[r].begin(), inputs[r].end());
      }
      std::vector<std::vector<uint8_t>> outputs(
          world, std::vector<uint8_t>(expected.size(), 0xAB));
      ForEachRank(world, [&](int r) {
        absl::Status s =
            comms[r]
                ->AllGather(inputs[r].data(), outputs[r].data(), counts, dtype)
                ->Wait();
        EXPECT_TRUE(s.ok()) << s;
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(outputs[r], expected)
            << "rank " << r << " dtype " << core::DTypeName(dtype)
            << " pattern " << pattern;
      }
    }
  }
}

TEST_P(GlooCollectiveTest, AllGatherInPlaceLeavesOwnShardAndFillsTheRest) {
  const int world = GetParam();
  Comms comms = Connect(world);
  const std::vector<int64_t> counts = CountsFor(world, 1);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), 0L);
  std::vector<float> expected;
  for (int r = 0; r < world; ++r) {
    std::vector<float> part = IntegerValues(counts[r], r);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  std::vector<std::vector<float>> buffers(world,
                                          std::vector<float>(total, -99.0f));
  ForEachRank(world, [&](int r) {
    int64_t offset = 0;
    for (int q = 0; q < r; ++q) offset += counts[q];
    std::vector<float> mine = IntegerValues(counts[r], r);
    std::copy(mine.begin(), mine.end(), buffers[r].begin() + offset);
    absl::Status s = comms[r]
                         ->AllGather(buffers[r].data() + offset,
                                     buffers[r].data(), counts, DType::kFloat32)
                         ->Wait();
    EXPECT_TRUE(s.ok()) << s;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(buffers[r], expected) << r;
}

TEST_P(GlooCollectiveTest, ReduceScatterSumsAndAveragesInFp32AndRoundsOnce) {
  const int world = GetParam();
  Comms comms = Connect(world);
  for (DType dtype : AllDTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        const std::vector<int64_t> counts = CountsFor(world, pattern);
        const int64_t total = std::accumulate(counts.begin(), counts.end(), 0L);
        std::vector<std::vector<float>> values(world);
        std::vector<std::vector<uint8_t>> inputs(world);
        for (int r = 0; r < world; ++r) {
          values[r] = IntegerValues(total, r + 3);
          inputs[r] = Encode(dtype, values[r]);
        }
        std::vector<std::vector<uint8_t>> outputs(world);
        std::vector<std::vector<uint8_t>> expected(world);
        int64_t offset = 0;
        for (int r = 0; r < world; ++r) {
          std::vector<float> ref(counts[r]);
          for (int64_t i = 0; i < counts[r]; ++i) {
            float sum = 0;
            for (int q = 0; q < world; ++q) sum += values[q][offset + i];
            ref[i] = op == ReduceOp::kAverage ? sum / world : sum;
          }
          expected[r] = Encode(dtype, ref);
          outputs[r].assign(expected[r].size(), 0xCD);
          offset += counts[r];
        }
        ForEachRank(world, [&](int r) {
          absl::Status s =
              comms[r]
                  ->ReduceScatter(inputs[r].data(), outputs[r].data(), counts,
                                  dtype, op)
                  ->Wait();
          EXPECT_TRUE(s.ok()) << s;
        });
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(outputs[r], expected[r])
              << "rank " << r << " dtype " << core::DTypeName(dtype) << " avg "
              << (op == ReduceOp::kAverage) << " pattern " << pattern;
        }
      }
    }
  }
}

TEST_P(GlooCollectiveTest, ReduceScatterInPlaceWritesTheOwnShardOfTheInput) {
  const int world = GetParam();
  Comms comms = Connect(world);
  const std::vector<int64_t> counts = CountsFor(world, 2);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), 0L);
  std::vector<std::vector<float>> buffers(world);
  for (int r = 0; r < world; ++r) buffers[r] = IntegerValues(total, r);
  std::vector<float> sums(total, 0.0f);
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < total; ++i) sums[i] += buffers[r][i];
  }
  ForEachRank(world, [&](int r) {
    int64_t offset = 0;
    for (int q = 0; q < r; ++q) offset += counts[q];
    absl::Status s =
        comms[r]
            ->ReduceScatter(buffers[r].data(), buffers[r].data() + offset,
                            counts, DType::kFloat32, ReduceOp::kSum)
            ->Wait();
    EXPECT_TRUE(s.ok()) << s;
  });
  int64_t offset = 0;
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < counts[r]; ++i) {
      ASSERT_EQ(buffers[r][offset + i], sums[offset + i]) << r << " " << i;
    }
    offset += counts[r];
  }
}

TEST_P(GlooCollectiveTest, AllReduceGivesEveryRankTheSameReduction) {
  const int world = GetParam();
  Comms comms = Connect(world);
  for (DType dtype : AllDTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (int64_t count : {0L, 1L, 13L, 600001L}) {
        std::vector<std::vector<float>> values(world);
        std::vector<std::vector<uint8_t>> buffers(world);
        for (int r = 0; r < world; ++r) {
          values[r] = IntegerValues(count, 5 * r + 1);
          buffers[r] = Encode(dtype, values[r]);
        }
        std::vector<float> ref(count);
        for (int64_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int q = 0; q < world; ++q) sum += values[q][i];
          ref[i] = op == ReduceOp::kAverage ? sum / world : sum;
        }
        const std::vector<uint8_t> expected = Encode(dtype, ref);
        ForEachRank(world, [&](int r) {
          absl::Status s =
              comms[r]->AllReduce(buffers[r].data(), count, dtype, op)->Wait();
          EXPECT_TRUE(s.ok()) << s;
        });
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(buffers[r], expected)
              << "rank " << r << " dtype " << core::DTypeName(dtype)
              << " count " << count;
        }
      }
    }
  }
}

TEST_P(GlooCollectiveTest, BroadcastCopiesTheRootBufferToEveryRank) {
  const int world = GetParam();
  Comms comms = Connect(world);
  for (DType dtype : AllDTypes()) {
    for (int root = 0; root < world; ++root) {
      const int64_t count = 1000 + root;
      const std::vector<uint8_t> expected =
          Encode(dtype, IntegerValues(count, root + 11));
      std::vector<std::vector<uint8_t>> buffers(world);
      for (int r = 0; r < world; ++r) {
        buffers[r] =
            r == root ? expected : std::vector<uint8_t>(expected.size(), 0);
      }
      ForEachRank(world, [&](int r) {
        absl::Status s =
            comms[r]->Broadcast(buffers[r].data(), count, dtype, root)->Wait();
        EXPECT_TRUE(s.ok()) << s;
      });
      for (int r = 0; r < world; ++r) EXPECT_EQ(buffers[r], expected) << r;
    }
  }
}

TEST_P(GlooCollectiveTest, SendAndRecvExchangeBytesBetweenPairedRanks) {
  const int world = GetParam();
  if (world < 2) GTEST_SKIP() << "needs a peer";
  Comms comms = Connect(world);
  // Ranks 2k and 2k+1 exchange: the even one sends first, the odd one
  // receives first (operations run one at a time, in issue order).
  std::vector<std::vector<uint8_t>> got(world, std::vector<uint8_t>(4096));
  std::vector<uint8_t> empty_got(world, 1);
  ForEachRank(world, [&](int r) {
    const int peer = r ^ 1;
    if (peer >= world) return;
    std::vector<uint8_t> mine(4096);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = (i * 31 + r) & 0xff;
    Collective& c = *comms[r];
    if (r % 2 == 0) {
      EXPECT_TRUE(c.Send(mine.data(), mine.size(), peer, 7)->Wait().ok());
      EXPECT_TRUE(c.Recv(got[r].data(), got[r].size(), peer, 9)->Wait().ok());
      EXPECT_TRUE(c.Send(nullptr, 0, peer, 11)->Wait().ok());
    } else {
      EXPECT_TRUE(c.Recv(got[r].data(), got[r].size(), peer, 7)->Wait().ok());
      EXPECT_TRUE(c.Send(mine.data(), mine.size(), peer, 9)->Wait().ok());
      EXPECT_TRUE(c.Recv(nullptr, 0, peer, 11)->Wait().ok());
    }
  });
  for (int r = 0; r < world; ++r) {
    const int peer = r ^ 1;
    if (peer >= world) continue;
    for (size_t i = 0; i < got[r].size(); ++i) {
      ASSERT_EQ(got[r][i], (i * 31 + peer) & 0xff) << r << " " << i;
    }
  }
  const CollectiveStats stats = comms[0]->Stats();
  EXPECT_EQ(stats.of(OpKind::kSend).calls, 2);
  EXPECT_EQ(stats.of(OpKind::kSend).bytes, 4096);
  EXPECT_EQ(stats.of(OpKind::kRecv).bytes, 4096);
}

// A stream of Sends and Recvs issued without waiting (how a shard copy goes,
// piece by piece): the worker posts the queued ones together. Every piece
// arrives intact and in place, each Work completes in issue order, and the
// counters count every op once.
TEST(GlooCollectiveFixedTest, QueuedSendsAndRecvsStreamInIssueOrder) {
  Comms comms = Connect(2);
  constexpr int kPieces = 40;
  std::vector<std::vector<uint8_t>> sent(kPieces), got(kPieces);
  for (int k = 0; k < kPieces; ++k) {
    sent[k].resize(1 + k * 4099);
    for (size_t i = 0; i < sent[k].size(); ++i) sent[k][i] = (i * 7 + k) & 0xff;
    got[k].assign(sent[k].size(), 0);
  }
  std::vector<bool> in_order(2, true);
  ForEachRank(2, [&](int r) {
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kPieces; ++k) {
      // Mixed tags: pieces 3k..3k+2 on tags 1, 2, 1; the receiver posts
      // the same sequence.
      const uint32_t tag = (k % 3 == 1) ? 2 : 1;
      works.push_back(
          r == 0 ? comms[0]->Send(sent[k].data(), sent[k].size(), 1, tag)
                 : comms[1]->Recv(got[k].data(), got[k].size(), 0, tag));
    }
    // Completed in issue order: once the last is done, every earlier one
    // is.
    EXPECT_TRUE(works.back()->Wait().ok()) << "rank " << r;
    for (int k = 0; k < kPieces; ++k) {
      if (!works[k]->Done()) in_order[r] = false;
    }
    for (int k = 0; k < kPieces; ++k) {
      EXPECT_TRUE(works[k]->Wait().ok()) << "rank " << r << " piece " << k;
    }
  });
  EXPECT_TRUE(in_order[0]);
  EXPECT_TRUE(in_order[1]);
  for (int k = 0; k < kPieces; ++k) ASSERT_EQ(got[k], sent[k]) << "piece " << k;
  int64_t bytes = 0;
  for (const auto& piece : sent) bytes += static_cast<int64_t>(piece.size());
  EXPECT_EQ(comms[0]->Stats().of(OpKind::kSend).calls, kPieces);
  EXPECT_EQ(comms[0]->Stats().of(OpKind::kSend).bytes, bytes);
  EXPECT_EQ(comms[1]->Stats().of(OpKind::kRecv).calls, kPieces);
  EXPECT_EQ(comms[1]->Stats().of(OpKind::kRecv).bytes, bytes);
}

// The receiver's communicator goes away after a few pieces: the sender's
// queued Sends (posted together) all fail, within their deadline, and the
// communicator stays broken.
TEST(GlooCollectiveFixedTest, QueuedSendsAllFailWhenThePeerGoesAway) {
  Comms comms = Connect(2, /*op_timeout=*/absl::Seconds(5));
  constexpr int kPieces = 12;
  std::vector<uint8_t> piece(1 << 20, 0x5A);
  std::vector<std::vector<uint8_t>> got(3, std::vector<uint8_t>(piece.size()));
  std::vector<std::shared_ptr<Work>> sends;
  for (int k = 0; k < kPieces; ++k) {
    sends.push_back(comms[0]->Send(piece.data(), piece.size(), 1, 3));
  }
  for (auto& g : got) {
    ASSERT_TRUE(comms[1]->Recv(g.data(), g.size(), 0, 3)->Wait().ok());
  }
  const MonoTime gone = MonoNow();
  comms[1]->Abort("the test's receiver leaves");
  comms[1].reset();
  int failed = 0;
  for (int k = 0; k < kPieces; ++k) {
    absl::Status s = sends[k]->Wait();
    if (!s.ok()) {
      ++failed;
      EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
                  s.code() == absl::StatusCode::kDeadlineExceeded ||
                  s.code() == absl::StatusCode::kAborted)
          << s;
    }
  }
  // Socket buffers may have taken a piece or two beyond the three received;
  // the rest cannot have gone anywhere.
  EXPECT_GE(failed, kPieces - 6);
  EXPECT_LT(MonoNow() - gone, absl::Seconds(5) + absl::Seconds(2));
  EXPECT_FALSE(comms[0]->AsyncError().ok());
  EXPECT_FALSE(comms[0]->Send(piece.data(), piece.size(), 1, 3)->Wait().ok());
}

TEST_P(GlooCollectiveTest, BarrierHoldsEveryRankUntilTheLastArrives) {
  const int world = GetParam();
  Comms comms = Connect(world);
  std::vector<absl::Duration> waited(world);
  ForEachRank(world, [&](int r) {
    if (r == world - 1) absl::SleepFor(absl::Milliseconds(300));
    const MonoTime start = MonoNow();
    EXPECT_TRUE(comms[r]->Barrier()->Wait().ok());
    waited[r] = MonoNow() - start;
  });
  if (world > 1) {
    for (int r = 0; r < world - 1; ++r) {
      EXPECT_GE(waited[r], absl::Milliseconds(200)) << r;
    }
  }
}

TEST_P(GlooCollectiveTest, OperationsIssuedTogetherRunInIssueOrder) {
  const int world = GetParam();
  Comms comms = Connect(world);
  const std::vector<int64_t> counts = CountsFor(world, 1);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), 0L);
  std::vector<std::vector<float>> gathered(world, std::vector<float>(total));
  std::vector<std::vector<float>> reduced(world, std::vector<float>(64));
  std::vector<std::vector<float>> mine(world);
  ForEachRank(world, [&](int r) {
    Collective& c = *comms[r];
    mine[r] = IntegerValues(counts[r], r);
    reduced[r].assign(64, static_cast<float>(r + 1));
    std::vector<std::shared_ptr<Work>> works;
    works.push_back(c.AllGather(mine[r].data(), gathered[r].data(), counts,
                                DType::kFloat32));
    works.push_back(
        c.AllReduce(reduced[r].data(), 64, DType::kFloat32, ReduceOp::kSum));
    works.push_back(c.Barrier());
    works.push_back(
        c.AllReduce(reduced[r].data(), 64, DType::kFloat32, ReduceOp::kSum));
    // Waiting in reverse order: the last one done means all are done.
    for (auto it = works.rbegin(); it != works.rend(); ++it) {
      EXPECT_TRUE((*it)->Wait().ok());
    }
    for (const auto& w : works) EXPECT_TRUE(w->Done());
  });
  const float once = world * (world + 1) / 2.0f;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(reduced[r], std::vector<float>(64, once * world)) << r;
  }
  const CollectiveStats stats = comms[0]->Stats();
  EXPECT_EQ(stats.of(OpKind::kAllReduce).calls, 2);
  EXPECT_EQ(stats.of(OpKind::kAllReduce).bytes, 2 * 64 * 4);
  EXPECT_EQ(stats.of(OpKind::kAllGather).bytes, total * 4);
  EXPECT_EQ(stats.of(OpKind::kBarrier).calls, 1);
  EXPECT_EQ(stats.of(OpKind::kAllGather).failures, 0);
}

OpOptions CallerWaits() {
  OpOptions options;
  options.caller_waits = true;
  return options;
}

TEST_P(GlooCollectiveTest, CallerWaitsRunsOnTheCallingThreadWhenIdle) {
  const int world = GetParam();
  Comms comms = Connect(world);
  const std::vector<int64_t> counts(world, 1000);
  std::vector<std::vector<float>> gathered(world,
                                           std::vector<float>(1000 * world));
  ForEachRank(world, [&](int r) {
    const std::vector<float> mine = IntegerValues(1000, r);
    std::shared_ptr<Work> work =
        comms[r]->AllGather(mine.data(), gathered[r].data(), counts,
                            DType::kFloat32, CallerWaits());
    // Run here: done when the call returns.
    EXPECT_TRUE(work->Done());
    EXPECT_TRUE(work->Wait().ok());
  });
  for (int r = 0; r < world; ++r) {
    for (int q = 0; q < world; ++q) {
      const std::vector<float> expected = IntegerValues(1000, q);
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(),
                             gathered[r].begin() + 1000 * q))
          << "rank " << r << " block " << q;
    }
  }
  EXPECT_EQ(comms[0]->Stats().of(OpKind::kAllGather).calls, 1);
  EXPECT_EQ(comms[0]->Stats().of(OpKind::kAllGather).bytes, 1000 * world * 4);
}

TEST_P(GlooCollectiveTest, CallerWaitsQueuesBehindEarlierWorkInIssueOrder) {
  const int world = GetParam();
  Comms comms = Connect(world);
  std::vector<std::vector<float>> buffers(world);
  ForEachRank(world, [&](int r) {
    Collective& c = *comms[r];
    buffers[r].assign(1 << 16, static_cast<float>(r + 1));
    // Async work first, then caller_waits work on the same buffer: the
    // second must run after the first (it is queued, not run here), and
    // both reduce in order.
    std::shared_ptr<Work> first = c.AllReduce(buffers[r].data(), 1 << 16,
                                              DType::kFloat32, ReduceOp::kSum);
    std::shared_ptr<Work> second =
        c.AllReduce(buffers[r].data(), 1 << 16, DType::kFloat32, ReduceOp::kSum,
                    CallerWaits());
    EXPECT_TRUE(second->Wait().ok());
    EXPECT_TRUE(first->Done());
    EXPECT_TRUE(first->Wait().ok());
    // And once idle again, the next one runs here.
    std::shared_ptr<Work> third = c.Barrier(CallerWaits());
    EXPECT_TRUE(third->Done());
    EXPECT_TRUE(third->Wait().ok());
  });
  const float once = world * (world + 1) / 2.0f;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(buffers[r], std::vector<float>(1 << 16, once * world)) << r;
  }
  EXPECT_EQ(comms[0]->Stats().of(OpKind::kAllReduce).calls, 2);
  EXPECT_EQ(comms[0]->Stats().of(OpKind::kBarrier).calls, 1);
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooCollectiveTest,
                         ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) {
                           return absl::StrCat("W", info.param);
                         });

TEST(GlooCollectiveFixedTest, ReduceScatterGivesTheSameBitsOnEveryRun) {
  constexpr int kWorld = 3;
  const std::vector<int64_t> counts = {300001, 70000, 500000};
  const int64_t total = std::accumulate(counts.begin(), counts.end(), 0L);
  std::vector<std::vector<float>> inputs(kWorld, std::vector<float>(total));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& input : inputs) {
    for (float& x : input) x = dist(rng) * 1e3f;
  }
  std::vector<std::vector<std::vector<float>>> runs;
  for (int run = 0; run < 2; ++run) {
    Comms comms = Connect(kWorld);
    std::vector<std::vector<float>> out(kWorld);
    ForEachRank(kWorld, [&](int r) {
      out[r].assign(counts[r], 0.0f);
      EXPECT_TRUE(comms[r]
                      ->ReduceScatter(inputs[r].data(), out[r].data(), counts,
                                      DType::kFloat32, ReduceOp::kAverage)
                      ->Wait()
                      .ok());
    });
    runs.push_back(out);
  }
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(runs[0][r].size(), runs[1][r].size());
    EXPECT_EQ(std::memcmp(runs[0][r].data(), runs[1][r].data(),
                          runs[0][r].size() * sizeof(float)),
              0)
        << "rank " << r;
  }
  // And close to the exact average.
  int64_t offset = 0;
  for (int r = 0; r < kWorld; ++r) {
    for (int64_t i = 0; i < counts[r]; i += 997) {
      double sum = 0;
      for (int q = 0; q < kWorld; ++q) sum += inputs[q][offset + i];
      EXPECT_NEAR(runs[0][r][i], sum / kWorld, 1e-3) << r << " " << i;
    }
    offset += counts[r];
  }
}

// Two ranks exchange blocks of several 1 MiB segments through a window of
// two receive slots (ChooseReduceScatterPipelining), so that later segments
// land where earlier ones were summed: every element must still be the one
// IEEE addition of the two inputs, the ring's bits, in place or not.
TEST(GlooCollectiveFixedTest, TwoRanksReduceScatterThroughTheWindowIsExact) {
  constexpr int kWorld = 2;
  const std::vector<int64_t> counts = {700001, 1300003};
  const int64_t total = counts[0] + counts[1];
  std::vector<std::vector<float>> inputs(kWorld, std::vector<float>(total));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& input : inputs) {
    for (float& x : input) x = dist(rng) * 1e3f;
  }
  Comms comms = Connect(kWorld);
  for (bool in_place : {false, true}) {
    std::vector<std::vector<float>> buffers = inputs;
    std::vector<std::vector<float>> outputs(kWorld);
    ForEachRank(kWorld, [&](int r) {
      const int64_t offset = r == 0 ? 0 : counts[0];
      outputs[r].assign(counts[r], 0.0f);
      float* out = in_place ? buffers[r].data() + offset : outputs[r].data();
      absl::Status s = comms[r]
                           ->ReduceScatter(buffers[r].data(), out, counts,
                                           DType::kFloat32, ReduceOp::kSum)
                           ->Wait();
      EXPECT_TRUE(s.ok()) << s;
      if (in_place) {
        outputs[r].assign(buffers[r].begin() + offset,
                          buffers[r].begin() + offset + counts[r]);
      }
    });
    for (int r = 0; r < kWorld; ++r) {
      const int64_t offset = r == 0 ? 0 : counts[0];
      std::vector<float> expected(counts[r]);
      for (int64_t i = 0; i < counts[r]; ++i) {
        expected[i] = inputs[1 - r][offset + i] + inputs[r][offset + i];
      }
      EXPECT_EQ(std::memcmp(outputs[r].data(), expected.data(),
                            expected.size() * sizeof(float)),
                0)
          << "rank " << r << " in place " << in_place;
    }
  }
}

// The direct reduce-scatter (W = 2 at every size, W = 3 up to 2 MiB blocks)
// grows its scratch with the largest block (at W = 2, up to its window of
// two segment slots): a sequence that grows it, sends less than it holds,
// sends nothing, sends empty blocks and interleaves other operations on the
// same connections must give the exact sums every time.
TEST(GlooCollectiveFixedTest, ReduceScatterStaysExactAcrossChangingShapes) {
  for (int world : {2, 3}) {
    Comms comms = Connect(world);
    const std::vector<std::vector<int64_t>> shapes = {
        {1000, 1000, 1000}, {5000, 3, 7},         {0, 0, 0}, {0, 10, 0},
        {2000, 1, 1},       {300000, 17, 250000}, {4, 4, 4}, {1, 400000, 2}};
    for (size_t step = 0; step < shapes.size(); ++step) {
      const std::vector<int64_t> counts(shapes[step].begin(),
                                        shapes[step].begin() + world);
      const int64_t total = std::accumulate(counts.begin(), counts.end(), 0L);
      std::vector<std::vector<float>> inputs(world);
      for (int r = 0; r < world; ++r) {
        inputs[r] = IntegerValues(total, static_cast<int>(step) * 5 + r);
      }
      std::vector<std::vector<float>> outputs(world);
      std::vector<std::vector<float>> gathered(world);
      ForEachRank(world, [&](int r) {
        outputs[r].assign(counts[r], -99.0f);
        absl::Status s =
            comms[r]
                ->ReduceScatter(inputs[r].data(), outputs[r].data(), counts,
                                DType::kFloat32, ReduceOp::kSum)
                ->Wait();
        EXPECT_TRUE(s.ok()) << s;
        // Another operation between two reduce-scatters, on the same pairs.
        std::vector<float> mine(3, static_cast<float>(r));
        gathered[r].assign(3 * world, -1.0f);
        s = comms[r]
                ->AllGather(mine.data(), gathered[r].data(),
                            std::vector<int64_t>(world, 3), DType::kFloat32)
                ->Wait();
        EXPECT_TRUE(s.ok()) << s;
      });
      int64_t offset = 0;
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < counts[r]; ++i) {
          float sum = 0;
          for (int q = 0; q < world; ++q) sum += inputs[q][offset + i];
          ASSERT_EQ(outputs[r][i], sum) << "world " << world << " step " << step
                                        << " rank " << r << " element " << i;
        }
        for (int q = 0; q < world; ++q) {
          EXPECT_EQ(gathered[r][3 * q], static_cast<float>(q));
        }
        offset += counts[r];
      }
    }
    for (const auto& comm : comms) {
      EXPECT_EQ(comm->Stats().of(OpKind::kReduceScatter).failures, 0);
      EXPECT_TRUE(comm->AsyncError().ok());
    }
  }
}

TEST(GlooCollectiveFixedTest, RejectsInvalidArgumentsWithoutBreaking) {
  constexpr int kWorld = 2;
  Comms comms = Connect(kWorld);
  ForEachRank(kWorld, [&](int r) {
    Collective& c = *comms[r];
    float buf[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    auto expect_invalid = [](const std::shared_ptr<Work>& work,
                             absl::string_view needle) {
      ASSERT_TRUE(work->Done());
      absl::Status s = work->Wait();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
    };
    expect_invalid(c.AllGather(buf, buf, {4}, DType::kFloat32), "counts");
    expect_invalid(c.AllGather(buf, buf, {4, -1}, DType::kFloat32),
                   "counts[1]");
    expect_invalid(c.AllGather(nullptr, buf, {4, 4}, DType::kFloat32), "input");
    expect_invalid(
        c.ReduceScatter(buf, nullptr, {4, 4}, DType::kFloat32, ReduceOp::kSum),
        "output");
    expect_invalid(c.AllReduce(buf, 8, static_cast<DType>(9), ReduceOp::kSum),
                   "dtype");
    expect_invalid(c.AllReduce(buf, -1, DType::kFloat32, ReduceOp::kSum),
                   "count");
    expect_invalid(c.Broadcast(buf, 8, DType::kFloat32, 2), "root");
    expect_invalid(c.Broadcast(buf, 8, DType::kFloat32, -1), "root");
    expect_invalid(c.Send(buf, 4, r, 0), "peer");
    expect_invalid(c.Recv(buf, 4, 5, 0), "peer");
    expect_invalid(c.Send(nullptr, 4, 1 - r, 0), "buffer");
    OpOptions negative;
    negative.timeout = absl::Seconds(-1);
    expect_invalid(c.Barrier(negative), "timeout");
    EXPECT_TRUE(c.AsyncError().ok());
    // Still healthy: a real operation works.
    absl::Status s =
        c.AllReduce(buf, 8, DType::kFloat32, ReduceOp::kSum)->Wait();
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(buf[0], 2.0f);
    EXPECT_TRUE(c.AsyncError().ok());
    EXPECT_EQ(c.Stats().of(OpKind::kAllGather).failures, 3);
    EXPECT_EQ(c.Stats().of(OpKind::kAllGather).calls, 0);
  });
}

TEST(GlooCollectiveFixedTest, CreateRejectsBadOptionsNamingTheField) {
  InMemoryStore store;
  struct Case {
    std::function<void(GlooCollectiveOptions&)> mutate;
    const char* field;
  };
  const std::vector<Case> cases = {
      {[](auto& o) { o.size = 0; }, "size"},
      {[](auto& o) { o.rank = 2; }, "rank"},
      {[](auto& o) { o.rank = -1; }, "rank"},
      {[](auto& o) { o.group = ""; }, "group"},
      {[](auto& o) { o.connect_timeout = absl::ZeroDuration(); },
       "connect_timeout"},
      {[](auto& o) { o.default_op_timeout = absl::Seconds(-1); },
       "default_op_timeout"},
  };
  for (const Case& c : cases) {
    GlooCollectiveOptions options = Options(0, 2);
    c.mutate(options);
    auto comm = CreateGlooCollective(options, store);
    ASSERT_FALSE(comm.ok());
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(comm.status().message().find(c.field), absl::string_view::npos)
        << comm.status();
  }
}

TEST(GlooCollectiveFixedTest, CreateTimesOutWhenARankNeverJoins) {
  InMemoryStore store;
  GlooCollectiveOptions options = Options(0, 2);
  options.connect_timeout = absl::Milliseconds(500);
  const MonoTime start = MonoNow();
  auto comm = CreateGlooCollective(options, store);
  const absl::Duration elapsed = MonoNow() - start;
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
      << comm.status();
  EXPECT_NE(comm.status().message().find("epoch/1/world/1"),
            absl::string_view::npos)
      << comm.status();
  EXPECT_LT(elapsed, absl::Seconds(3));
}

}  // namespace
}  // namespace shardd::comm
