// The Gloo communicator's failure semantics: Abort while operations run or
// wait, on the worker or the caller's thread, and peers that leave a group
// mid-operation (destroyed, aborted, silent). The operations' results are
// in gloo_collective_test.cc.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/gloo_collective.h"
#include "daemon/comm/gloo_test_group.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

using core::DType;
using testing::AllDepartures;
using testing::Comms;
using testing::Departure;
using testing::DepartureName;
using testing::ForEachRank;
using testing::Leave;

Comms Connect(int world, absl::Duration op_timeout = absl::Seconds(30)) {
  return testing::ConnectGroup(world, op_timeout);
}

OpOptions CallerWaits() {
  OpOptions options;
  options.caller_waits = true;
  return options;
}

// The operation each abort test leaves in flight on rank 0 (rank 1 never
// issues it).
enum class InFlight {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kRecv,
  kBarrier
};

class GlooCollectiveAbortTest : public ::testing::TestWithParam<InFlight> {};

std::shared_ptr<Work> IssueInFlight(Collective& c, InFlight which,
                                    std::vector<float>& buf) {
  const std::vector<int64_t> counts = {1 << 16, 1 << 16};
  switch (which) {
    case InFlight::kAllGather:
      return c.AllGather(buf.data(), buf.data(), counts, DType::kFloat32);
    case InFlight::kReduceScatter:
      return c.ReduceScatter(buf.data(), buf.data(), counts, DType::kFloat32,
                             ReduceOp::kSum);
    case InFlight::kAllReduce:
      return c.AllReduce(buf.data(), 1 << 17, DType::kFloat32, ReduceOp::kSum);
    case InFlight::kBroadcast:
      return c.Broadcast(buf.data(), 1 << 17, DType::kFloat32, 1);
    case InFlight::kRecv:
      return c.Recv(buf.data(), 1024, 1, 3);
    case InFlight::kBarrier:
      return c.Barrier();
  }
  return nullptr;
}

TEST_P(GlooCollectiveAbortTest, AbortEndsRunningAndQueuedWorkPromptly) {
  Comms comms = Connect(2);  // 30 s operation deadline.
  Collective& c = *comms[0];
  std::vector<float> buf(1 << 17, 1.0f);
  std::vector<float> other(64, 1.0f);
  std::shared_ptr<Work> running = IssueInFlight(c, GetParam(), buf);
  std::shared_ptr<Work> queued1 =
      c.AllReduce(other.data(), 64, DType::kFloat32, ReduceOp::kSum);
  std::shared_ptr<Work> queued2 = c.Barrier();
  // Wait until the first operation is running.
  const OpKind kinds[] = {OpKind::kAllGather, OpKind::kReduceScatter,
                          OpKind::kAllReduce, OpKind::kBroadcast,
                          OpKind::kRecv,      OpKind::kBarrier};
  const OpKind kind = kinds[static_cast<int>(GetParam())];
  const MonoTime until = MonoNow() + absl::Seconds(10);
  while (c.Stats().of(kind).calls == 0 && MonoNow() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(c.Stats().of(kind).calls, 1);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(running->Done());

  const MonoTime start = MonoNow();
  c.Abort("test abort");
  c.Abort("second abort");  // Idempotent.
  EXPECT_LT(MonoNow() - start, absl::Milliseconds(200));
  EXPECT_TRUE(queued1->Done());
  EXPECT_TRUE(queued2->Done());
  EXPECT_EQ(queued1->Wait().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(queued2->Wait().code(), absl::StatusCode::kAborted);
  absl::Status s = running->Wait();
  EXPECT_LT(MonoNow() - start, absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("test abort"), absl::string_view::npos) << s;
  EXPECT_EQ(c.AsyncError().code(), absl::StatusCode::kAborted);
  // Later work fails at once.
  std::shared_ptr<Work> later = c.Barrier();
  EXPECT_TRUE(later->Done());
  EXPECT_EQ(later->Wait().code(), absl::StatusCode::kAborted);
  // The peer learns that the connection is gone on its next operation.
  absl::Status peer = comms[1]->Barrier()->Wait();
  EXPECT_FALSE(peer.ok());
  // Destroying an aborted communicator returns at once.
  const MonoTime destroy = MonoNow();
  comms.clear();
  EXPECT_LT(MonoNow() - destroy, absl::Seconds(2));
}

TEST(GlooCollectiveFixedTest, AbortEndsAnOperationRunningOnTheCallersThread) {
  Comms comms = Connect(2);  // 30 s operation deadline.
  Collective& c = *comms[0];
  std::vector<float> buf(1024, 1.0f);
  absl::Status status;
  MonoTime returned;
  // Rank 1 never posts its send: the receive runs on this thread until the
  // abort.
  std::thread caller([&] {
    status = c.Recv(buf.data(), 1024, 1, 7, CallerWaits())->Wait();
    returned = MonoNow();
  });
  const MonoTime until = MonoNow() + absl::Seconds(10);
  while (c.Stats().of(OpKind::kRecv).calls == 0 && MonoNow() < until) {
    absl::SleepFor(absl::Milliseconds(1));  // Polling with a deadline.
  }
  ASSERT_EQ(c.Stats().of(OpKind::kRecv).calls, 1);
  // Queued behind it meanwhile: failed by the abort, never run.
  std::shared_ptr<Work> queued = c.Barrier();
  const MonoTime start = MonoNow();
  c.Abort("test abort");
  caller.join();
  EXPECT_LT(returned - start, absl::Seconds(2));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_EQ(queued->Wait().code(), absl::StatusCode::kAborted);
  const MonoTime destroy = MonoNow();
  comms.clear();
  EXPECT_LT(MonoNow() - destroy, absl::Seconds(2));
}

std::string InFlightName(const ::testing::TestParamInfo<InFlight>& info) {
  static const char* const kNames[] = {"AllGather", "ReduceScatter",
                                       "AllReduce", "Broadcast",
                                       "Recv",      "Barrier"};
  return kNames[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Ops, GlooCollectiveAbortTest,
                         ::testing::Values(InFlight::kAllGather,
                                           InFlight::kReduceScatter,
                                           InFlight::kAllReduce,
                                           InFlight::kBroadcast,
                                           InFlight::kRecv, InFlight::kBarrier),
                         InFlightName);

class GlooCollectivePeerLossTest : public ::testing::TestWithParam<Departure> {
};

// Runs `op` (one operation of kind `kind` on 3 << 18 floats per rank's
// buffer, 1 << 18 per part) on every rank but the last, which leaves as
// the test's parameter says; the others must fail within the deadline and
// stay broken.
void ExpectOthersFailWhenAPeerLeaves(
    Departure departure, OpKind kind,
    const std::function<std::shared_ptr<Work>(
        Collective&, std::vector<float>&, const std::vector<int64_t>&)>& op) {
  constexpr int kWorld = 3;
  const absl::Duration timeout = absl::Seconds(2);
  Comms comms = Connect(kWorld, timeout);
  const std::vector<int64_t> counts = {1 << 18, 1 << 18, 1 << 18};
  std::vector<std::vector<float>> bufs(kWorld,
                                       std::vector<float>(3 << 18, 1.0f));
  std::vector<absl::Status> results(kWorld);
  std::vector<absl::Duration> elapsed(kWorld);
  ForEachRank(kWorld, [&](int r) {
    if (r == kWorld - 1) {
      absl::SleepFor(absl::Milliseconds(200));
      Leave(departure, comms[r]);
      return;
    }
    const MonoTime start = MonoNow();
    results[r] = op(*comms[r], bufs[r], counts)->Wait();
    elapsed[r] = MonoNow() - start;
  });
  for (int r = 0; r < kWorld - 1; ++r) {
    EXPECT_TRUE(results[r].code() == absl::StatusCode::kUnavailable ||
                results[r].code() == absl::StatusCode::kDeadlineExceeded)
        << r << ": " << results[r];
    EXPECT_LT(elapsed[r], timeout + absl::Milliseconds(1500)) << r;
    const absl::Status error = comms[r]->AsyncError();
    EXPECT_FALSE(error.ok());
    EXPECT_NE(error.message().find("epoch 1 is broken"),
              absl::string_view::npos)
        << error;
    std::shared_ptr<Work> later = comms[r]->Barrier();
    EXPECT_TRUE(later->Done());
    EXPECT_EQ(later->Wait().code(), error.code());
    EXPECT_EQ(comms[r]->Stats().of(kind).failures, 1);
  }
  const MonoTime destroy = MonoNow();
  comms.clear();
  EXPECT_LT(MonoNow() - destroy, absl::Seconds(3));
}

TEST_P(GlooCollectivePeerLossTest, OthersFailWithinTheDeadlineAndStayBroken) {
  ExpectOthersFailWhenAPeerLeaves(GetParam(), OpKind::kReduceScatter,
                                  [](Collective& comm, std::vector<float>& buf,
                                     const std::vector<int64_t>& counts) {
                                    return comm.ReduceScatter(
                                        buf.data(), buf.data(), counts,
                                        DType::kFloat32, ReduceOp::kSum);
                                  });
}

// The direct all-gather (parts of 1 MiB) has every receive posted at once:
// a peer that leaves must still fail the others promptly.
TEST_P(GlooCollectivePeerLossTest, AllGatherFailsWithinTheDeadlineToo) {
  ExpectOthersFailWhenAPeerLeaves(
      GetParam(), OpKind::kAllGather,
      [](Collective& comm, std::vector<float>& buf,
         const std::vector<int64_t>& counts) {
        const int64_t offset = comm.rank() * counts[0];
        return comm.AllGather(buf.data() + offset, buf.data(), counts,
                              DType::kFloat32);
      });
}

// Two faults at once: of four ranks in a direct all-gather, one is
// destroyed and another stays silent; both survivors fail within the
// deadline (not one deadline per missing peer) and stay broken.
TEST(GlooCollectiveFixedTest, AllGatherFailsPromptlyWhenTwoPeersLeaveAtOnce) {
  constexpr int kWorld = 4;
  const absl::Duration timeout = absl::Seconds(2);
  Comms comms = Connect(kWorld, timeout);
  const std::vector<int64_t> counts(kWorld, 1 << 16);
  std::vector<std::vector<float>> bufs(kWorld,
                                       std::vector<float>(kWorld << 16, 1.0f));
  std::vector<absl::Status> results(kWorld);
  std::vector<absl::Duration> elapsed(kWorld);
  ForEachRank(kWorld, [&](int r) {
    if (r == 2) {
      absl::SleepFor(absl::Milliseconds(200));
      comms[r].reset();
      return;
    }
    if (r == 3) return;  // Alive, connected, never issues the operation.
    const MonoTime start = MonoNow();
    results[r] = comms[r]
                     ->AllGather(bufs[r].data() + r * counts[0], bufs[r].data(),
                                 counts, DType::kFloat32)
                     ->Wait();
    elapsed[r] = MonoNow() - start;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].code() == absl::StatusCode::kUnavailable ||
                results[r].code() == absl::StatusCode::kDeadlineExceeded)
        << r << ": " << results[r];
    EXPECT_LT(elapsed[r], timeout + absl::Milliseconds(1500)) << r;
    EXPECT_FALSE(comms[r]->AsyncError().ok()) << r;
    EXPECT_EQ(comms[r]->Stats().of(OpKind::kAllGather).failures, 1) << r;
  }
  const MonoTime destroy = MonoNow();
  comms.clear();
  EXPECT_LT(MonoNow() - destroy, absl::Seconds(3));
}

INSTANTIATE_TEST_SUITE_P(Departures, GlooCollectivePeerLossTest,
                         ::testing::ValuesIn(AllDepartures()), DepartureName);

}  // namespace
}  // namespace shardd::comm
