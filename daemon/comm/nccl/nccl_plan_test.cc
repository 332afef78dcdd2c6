#include "daemon/comm/nccl/nccl_plan.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

using core::DType;
using ::testing::HasSubstr;

BufferRef In(int64_t off = 0) { return {BufferBase::kInput, off}; }
BufferRef Out(int64_t off = 0) { return {BufferBase::kOutput, off}; }
BufferRef Scr(int64_t off = 0) { return {BufferBase::kScratch, off}; }
BufferRef Null() { return {}; }

NcclCall Call(NcclCallKind kind, BufferRef send, BufferRef recv, int64_t count,
              WireType type, int root = -1) {
  NcclCall c;
  c.kind = kind;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.type = type;
  c.root = root;
  return c;
}

NcclCall Group(NcclCallKind kind) {
  NcclCall c;
  c.kind = kind;
  return c;
}

NcclCall Divide(BufferRef where, int64_t count, int divisor) {
  NcclCall c =
      Call(NcclCallKind::kDivide, Null(), where, count, WireType::kFloat32);
  c.divisor = divisor;
  return c;
}

std::vector<std::string> Lines(const NcclPlan& plan) {
  std::vector<std::string> out;
  for (const NcclCall& c : plan.calls) out.push_back(DescribeCall(c));
  return out;
}

void ExpectCalls(const NcclPlan& plan, const std::vector<NcclCall>& want) {
  std::vector<std::string> want_lines;
  for (const NcclCall& c : want) want_lines.push_back(DescribeCall(c));
  EXPECT_EQ(Lines(plan), want_lines) << DescribePlan(plan);
  EXPECT_EQ(plan.calls, want);
}

TEST(NcclPlanTest, EqualAllGatherIsOneNcclAllGather) {
  auto plan =
      PlanAllGather({.rank = 1, .size = 4}, {5, 5, 5, 5}, DType::kBFloat16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(*plan, {Call(NcclCallKind::kAllGather, In(), Out(), 5,
                           WireType::kBFloat16)});
  EXPECT_EQ(plan->input_bytes, 10);
  EXPECT_EQ(plan->output_bytes, 40);
  EXPECT_EQ(plan->payload_bytes, 40);
  EXPECT_EQ(plan->scratch_bytes, 0);
}

TEST(NcclPlanTest, UnevenAllGatherBecomesGroupedBroadcasts) {
  // fp32: rank r's range starts at 4 * Σ_{q<r} counts[q] bytes.
  auto plan = PlanAllGather({.rank = 2, .size = 3}, {3, 1, 4}, DType::kFloat32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Group(NcclCallKind::kGroupStart),
       Call(NcclCallKind::kBroadcast, Null(), Out(0), 3, WireType::kFloat32, 0),
       Call(NcclCallKind::kBroadcast, Null(), Out(12), 1, WireType::kFloat32,
            1),
       Call(NcclCallKind::kBroadcast, In(), Out(16), 4, WireType::kFloat32, 2),
       Group(NcclCallKind::kGroupEnd)});
  EXPECT_EQ(plan->input_bytes, 16);
  EXPECT_EQ(plan->output_bytes, 32);
  EXPECT_EQ(plan->payload_bytes, 32);
}

TEST(NcclPlanTest, UnevenAllGatherSkipsRanksWithNothingToGive) {
  auto plan = PlanAllGather({.rank = 0, .size = 3}, {2, 0, 3}, DType::kFloat16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Group(NcclCallKind::kGroupStart),
       Call(NcclCallKind::kBroadcast, In(), Out(0), 2, WireType::kFloat16, 0),
       Call(NcclCallKind::kBroadcast, Null(), Out(4), 3, WireType::kFloat16, 2),
       Group(NcclCallKind::kGroupEnd)});
}

TEST(NcclPlanTest, EmptyAllGatherHasNoCalls) {
  auto plan = PlanAllGather({.rank = 0, .size = 2}, {0, 0}, DType::kFloat32);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->calls.empty());
  EXPECT_EQ(plan->payload_bytes, 0);
}

TEST(NcclPlanTest, SingleRankAllGatherIsOneNcclAllGather) {
  auto plan = PlanAllGather({.rank = 0, .size = 1}, {7}, DType::kFloat32);
  ASSERT_TRUE(plan.ok());
  ExpectCalls(*plan, {Call(NcclCallKind::kAllGather, In(), Out(), 7,
                           WireType::kFloat32)});
}

TEST(NcclPlanTest, AllGatherRejectsCountsOfTheWrongLength) {
  auto plan = PlanAllGather({.rank = 0, .size = 3}, {1, 2}, DType::kFloat32);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("counts has 2 entries"));
}

TEST(NcclPlanTest, AllGatherRejectsANegativeCountNamingIt) {
  auto plan =
      PlanAllGather({.rank = 0, .size = 3}, {1, -2, 3}, DType::kFloat32);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("counts[1] must be >= 0"));
}

TEST(NcclPlanTest, AllGatherRejectsCountsWhoseBytesOverflow) {
  const int64_t big = std::numeric_limits<int64_t>::max() / 8;
  auto plan =
      PlanAllGather({.rank = 0, .size = 3}, {big, big, big}, DType::kFloat32);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("counts[2]"));
  EXPECT_THAT(plan.status().message(), HasSubstr("overflows"));
}

TEST(NcclPlanTest, RejectsAnUnknownDType) {
  auto plan =
      PlanAllGather({.rank = 0, .size = 1}, {1}, static_cast<DType>(42));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("dtype"));
}

TEST(NcclPlanTest, RejectsARankOutsideTheGroup) {
  auto plan = PlanBarrier({.rank = 4, .size = 4});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("rank 4"));
  EXPECT_EQ(PlanBarrier({.rank = 0, .size = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclPlanTest, EqualFp32ReduceScatterIsOneNcclReduceScatter) {
  auto plan = PlanReduceScatter({.rank = 1, .size = 2}, {6, 6}, DType::kFloat32,
                                ReduceOp::kSum, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(*plan, {Call(NcclCallKind::kReduceScatter, In(), Out(), 6,
                           WireType::kFloat32)});
  EXPECT_EQ(plan->input_bytes, 48);
  EXPECT_EQ(plan->output_bytes, 24);
  EXPECT_EQ(plan->payload_bytes, 48);  // nccl-tests: the input
}

TEST(NcclPlanTest, Fp32AverageSumsThenDividesTheOutputByTheGroupSize) {
  auto plan =
      PlanReduceScatter({.rank = 0, .size = 4}, {2, 2, 2, 2}, DType::kFloat32,
                        ReduceOp::kAverage, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(*plan, {Call(NcclCallKind::kReduceScatter, In(), Out(), 2,
                           WireType::kFloat32),
                      Divide(Out(), 2, 4)});
}

TEST(NcclPlanTest, UnevenFp32ReduceScatterBecomesGroupedReduces) {
  auto plan =
      PlanReduceScatter({.rank = 1, .size = 3}, {2, 3, 1}, DType::kFloat32,
                        ReduceOp::kAverage, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Group(NcclCallKind::kGroupStart),
       Call(NcclCallKind::kReduce, In(0), Null(), 2, WireType::kFloat32, 0),
       Call(NcclCallKind::kReduce, In(8), Out(0), 3, WireType::kFloat32, 1),
       Call(NcclCallKind::kReduce, In(20), Null(), 1, WireType::kFloat32, 2),
       Group(NcclCallKind::kGroupEnd), Divide(Out(), 3, 3)});
  EXPECT_EQ(plan->input_bytes, 24);
  EXPECT_EQ(plan->output_bytes, 12);
}

TEST(NcclPlanTest, Bf16ReduceScatterReducesInFp32ScratchAndRoundsOnce) {
  auto plan =
      PlanReduceScatter({.rank = 1, .size = 2}, {3, 3}, DType::kBFloat16,
                        ReduceOp::kSum, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // In place in scratch: rank 1's fp32 result sits at 3 * 4 bytes.
  ExpectCalls(
      *plan,
      {Call(NcclCallKind::kUpcast, In(), Scr(), 6, WireType::kBFloat16),
       Call(NcclCallKind::kReduceScatter, Scr(0), Scr(12), 3,
            WireType::kFloat32),
       Call(NcclCallKind::kDowncast, Scr(12), Out(), 3, WireType::kBFloat16)});
  EXPECT_EQ(plan->scratch_bytes, 24);
  EXPECT_EQ(plan->input_bytes, 12);
  EXPECT_EQ(plan->output_bytes, 6);
}

TEST(NcclPlanTest, UnevenFp16AverageReducesDividesAndDowncastsInFp32) {
  auto plan = PlanReduceScatter({.rank = 0, .size = 2}, {1, 4}, DType::kFloat16,
                                ReduceOp::kAverage, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Call(NcclCallKind::kUpcast, In(), Scr(), 5, WireType::kFloat16),
       Group(NcclCallKind::kGroupStart),
       Call(NcclCallKind::kReduce, Scr(0), Scr(0), 1, WireType::kFloat32, 0),
       Call(NcclCallKind::kReduce, Scr(4), Null(), 4, WireType::kFloat32, 1),
       Group(NcclCallKind::kGroupEnd), Divide(Scr(0), 1, 2),
       Call(NcclCallKind::kDowncast, Scr(0), Out(), 1, WireType::kFloat16)});
  EXPECT_EQ(plan->scratch_bytes, 20);
}

TEST(NcclPlanTest, ReduceScatterWithNothingForThisRankSkipsItsKernels) {
  auto plan =
      PlanReduceScatter({.rank = 1, .size = 2}, {4, 0}, DType::kBFloat16,
                        ReduceOp::kAverage, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Call(NcclCallKind::kUpcast, In(), Scr(), 4, WireType::kBFloat16),
       Group(NcclCallKind::kGroupStart),
       Call(NcclCallKind::kReduce, Scr(0), Null(), 4, WireType::kFloat32, 0),
       Group(NcclCallKind::kGroupEnd)});
  EXPECT_EQ(plan->output_bytes, 0);
}

NcclCall P2p(NcclCallKind kind, BufferRef buffer, int64_t count, int peer) {
  NcclCall c;
  c.kind = kind;
  (kind == NcclCallKind::kSend ? c.send : c.recv) = buffer;
  c.count = count;
  c.type = WireType::kFloat32;
  c.peer = peer;
  return c;
}

TEST(NcclPlanTest, FixedReduceScatterExchangesBlocksAndSumsInRingOrder) {
  // Rank 1 of 3: block 1 is in[2] + in[0] + in[1], as the Gloo ring sums
  // it. Slot 1 (peer 2) at scratch 0, slot 2 (peer 0) at 3 * 4 bytes.
  auto plan =
      PlanReduceScatter({.rank = 1, .size = 3}, {2, 3, 1}, DType::kFloat32,
                        ReduceOp::kSum, ReductionOrder::kFixed);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Group(NcclCallKind::kGroupStart), P2p(NcclCallKind::kSend, In(20), 1, 2),
       P2p(NcclCallKind::kRecv, Scr(0), 3, 2),
       P2p(NcclCallKind::kSend, In(0), 2, 0),
       P2p(NcclCallKind::kRecv, Scr(12), 3, 0), Group(NcclCallKind::kGroupEnd),
       Call(NcclCallKind::kAdd, Scr(12), Scr(0), 3, WireType::kFloat32),
       Call(NcclCallKind::kAdd, In(8), Scr(0), 3, WireType::kFloat32),
       Call(NcclCallKind::kCopy, Scr(0), Out(), 3, WireType::kFloat32)});
  EXPECT_EQ(plan->scratch_bytes, 24);
  EXPECT_EQ(plan->input_bytes, 24);
  EXPECT_EQ(plan->output_bytes, 12);
}

TEST(NcclPlanTest, FixedBf16AverageSumsInFp32DividesAndRoundsOnce) {
  // The fp32 copy of the input takes scratch [0, 24); the slot follows.
  auto plan =
      PlanReduceScatter({.rank = 0, .size = 2}, {3, 3}, DType::kBFloat16,
                        ReduceOp::kAverage, ReductionOrder::kFixed);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Call(NcclCallKind::kUpcast, In(), Scr(), 6, WireType::kBFloat16),
       Group(NcclCallKind::kGroupStart),
       P2p(NcclCallKind::kSend, Scr(12), 3, 1),
       P2p(NcclCallKind::kRecv, Scr(24), 3, 1), Group(NcclCallKind::kGroupEnd),
       Call(NcclCallKind::kAdd, Scr(0), Scr(24), 3, WireType::kFloat32),
       Divide(Scr(24), 3, 2),
       Call(NcclCallKind::kDowncast, Scr(24), Out(), 3, WireType::kBFloat16)});
  EXPECT_EQ(plan->scratch_bytes, 36);
}

TEST(NcclPlanTest, FixedReduceScatterWithNothingForThisRankOnlySends) {
  auto plan = PlanReduceScatter({.rank = 1, .size = 2}, {4, 0}, DType::kFloat32,
                                ReduceOp::kAverage, ReductionOrder::kFixed);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(*plan, {Group(NcclCallKind::kGroupStart),
                      P2p(NcclCallKind::kSend, In(0), 4, 0),
                      Group(NcclCallKind::kGroupEnd)});
  EXPECT_EQ(plan->scratch_bytes, 0);
}

TEST(NcclPlanTest, FixedReduceScatterOfOneRankIsNcclsCopy) {
  for (ReductionOrder order : {ReductionOrder::kFixed, ReductionOrder::kNccl}) {
    auto plan = PlanReduceScatter({.rank = 0, .size = 1}, {5}, DType::kFloat32,
                                  ReduceOp::kSum, order);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectCalls(*plan, {Call(NcclCallKind::kReduceScatter, In(), Out(), 5,
                             WireType::kFloat32)});
  }
}

TEST(NcclPlanTest, FixedAllReduceScattersOnAnEvenSplitThenGathersInPlace) {
  // 8 over 3 ranks: 3, 3, 2 (the Gloo backend's split). Rank 2's block
  // starts at 6 * 4 bytes; slot 1 (peer 0) at 0, slot 2 (peer 1) at 8.
  auto plan = PlanAllReduce({.rank = 2, .size = 3}, 8, DType::kFloat32,
                            ReduceOp::kAverage, ReductionOrder::kFixed);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Group(NcclCallKind::kGroupStart), P2p(NcclCallKind::kSend, Out(0), 3, 0),
       P2p(NcclCallKind::kRecv, Scr(0), 2, 0),
       P2p(NcclCallKind::kSend, Out(12), 3, 1),
       P2p(NcclCallKind::kRecv, Scr(8), 2, 1), Group(NcclCallKind::kGroupEnd),
       Call(NcclCallKind::kAdd, Scr(8), Scr(0), 2, WireType::kFloat32),
       Call(NcclCallKind::kAdd, Out(24), Scr(0), 2, WireType::kFloat32),
       Divide(Scr(0), 2, 3),
       Call(NcclCallKind::kCopy, Scr(0), Out(24), 2, WireType::kFloat32),
       Group(NcclCallKind::kGroupStart),
       Call(NcclCallKind::kBroadcast, Null(), Out(0), 3, WireType::kFloat32, 0),
       Call(NcclCallKind::kBroadcast, Null(), Out(12), 3, WireType::kFloat32,
            1),
       Call(NcclCallKind::kBroadcast, Out(24), Out(24), 2, WireType::kFloat32,
            2),
       Group(NcclCallKind::kGroupEnd)});
  EXPECT_EQ(plan->scratch_bytes, 16);
  EXPECT_EQ(plan->output_bytes, 32);
}

TEST(NcclPlanTest, FixedBf16AllReduceGathersTheRoundedBlocksInBf16) {
  auto plan = PlanAllReduce({.rank = 1, .size = 2}, 4, DType::kBFloat16,
                            ReduceOp::kSum, ReductionOrder::kFixed);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCalls(
      *plan,
      {Call(NcclCallKind::kUpcast, Out(), Scr(), 4, WireType::kBFloat16),
       Group(NcclCallKind::kGroupStart), P2p(NcclCallKind::kSend, Scr(0), 2, 0),
       P2p(NcclCallKind::kRecv, Scr(16), 2, 0), Group(NcclCallKind::kGroupEnd),
       Call(NcclCallKind::kAdd, Scr(8), Scr(16), 2, WireType::kFloat32),
       Call(NcclCallKind::kDowncast, Scr(16), Out(4), 2, WireType::kBFloat16),
       Call(NcclCallKind::kAllGather, Out(4), Out(), 2, WireType::kBFloat16)});
  EXPECT_EQ(plan->scratch_bytes, 24);
}

TEST(NcclPlanTest, ParsesReductionOrderNamesAndRejectsOthers) {
  for (ReductionOrder order : {ReductionOrder::kFixed, ReductionOrder::kNccl}) {
    auto parsed = ParseReductionOrder(ReductionOrderName(order));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, order);
  }
  auto bad = ParseReductionOrder("ring");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'ring'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("fixed, nccl"));
}

TEST(NcclPlanTest, SingleRankAverageNeedsNoDivide) {
  auto plan = PlanAllReduce({.rank = 0, .size = 1}, 8, DType::kFloat32,
                            ReduceOp::kAverage, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok());
  ExpectCalls(*plan, {Call(NcclCallKind::kAllReduce, Out(), Out(), 8,
                           WireType::kFloat32)});
}

TEST(NcclPlanTest, Fp32AllReduceIsInPlace) {
  auto plan = PlanAllReduce({.rank = 2, .size = 3}, 8, DType::kFloat32,
                            ReduceOp::kAverage, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok());
  ExpectCalls(*plan, {Call(NcclCallKind::kAllReduce, Out(), Out(), 8,
                           WireType::kFloat32),
                      Divide(Out(), 8, 3)});
  EXPECT_EQ(plan->input_bytes, 0);
  EXPECT_EQ(plan->output_bytes, 32);
  EXPECT_EQ(plan->payload_bytes, 32);
}

TEST(NcclPlanTest, Bf16AllReduceUpcastsReducesDividesDowncasts) {
  auto plan = PlanAllReduce({.rank = 0, .size = 2}, 10, DType::kBFloat16,
                            ReduceOp::kAverage, ReductionOrder::kNccl);
  ASSERT_TRUE(plan.ok());
  ExpectCalls(
      *plan,
      {Call(NcclCallKind::kUpcast, Out(), Scr(), 10, WireType::kBFloat16),
       Call(NcclCallKind::kAllReduce, Scr(), Scr(), 10, WireType::kFloat32),
       Divide(Scr(), 10, 2),
       Call(NcclCallKind::kDowncast, Scr(), Out(), 10, WireType::kBFloat16)});
  EXPECT_EQ(plan->scratch_bytes, 40);
  EXPECT_EQ(plan->payload_bytes, 20);
}

TEST(NcclPlanTest, AllReduceRejectsANegativeCount) {
  auto plan = PlanAllReduce({.rank = 0, .size = 2}, -1, DType::kFloat32,
                            ReduceOp::kSum, ReductionOrder::kNccl);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("count must be >= 0"));
}

TEST(NcclPlanTest, RejectsAnUnknownReduceOp) {
  auto plan = PlanAllReduce({.rank = 0, .size = 2}, 1, DType::kFloat32,
                            static_cast<ReduceOp>(9), ReductionOrder::kNccl);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("op"));
}

TEST(NcclPlanTest, BroadcastIsInPlaceFromRoot) {
  auto plan = PlanBroadcast({.rank = 0, .size = 4}, 3, DType::kFloat16, 2);
  ASSERT_TRUE(plan.ok());
  ExpectCalls(*plan, {Call(NcclCallKind::kBroadcast, Out(), Out(), 3,
                           WireType::kFloat16, 2)});
  EXPECT_EQ(plan->payload_bytes, 6);
}

TEST(NcclPlanTest, BroadcastRejectsARootOutsideTheGroup) {
  auto plan = PlanBroadcast({.rank = 0, .size = 4}, 3, DType::kFloat32, 4);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("root 4"));
}

TEST(NcclPlanTest, SendAndRecvMoveBytes) {
  auto send = PlanSend({.rank = 0, .size = 2}, 100, 1);
  ASSERT_TRUE(send.ok());
  ASSERT_EQ(send->calls.size(), 1u);
  EXPECT_EQ(send->calls[0].kind, NcclCallKind::kSend);
  EXPECT_EQ(send->calls[0].send, In());
  EXPECT_EQ(send->calls[0].count, 100);
  EXPECT_EQ(send->calls[0].type, WireType::kBytes);
  EXPECT_EQ(send->calls[0].peer, 1);
  EXPECT_EQ(send->input_bytes, 100);

  auto recv = PlanRecv({.rank = 1, .size = 2}, 100, 0);
  ASSERT_TRUE(recv.ok());
  ASSERT_EQ(recv->calls.size(), 1u);
  EXPECT_EQ(recv->calls[0].kind, NcclCallKind::kRecv);
  EXPECT_EQ(recv->calls[0].recv, Out());
  EXPECT_EQ(recv->calls[0].peer, 0);
  EXPECT_EQ(recv->output_bytes, 100);
  EXPECT_EQ(recv->payload_bytes, 100);
}

TEST(NcclPlanTest, SendRejectsItselfAndPeersOutsideTheGroup) {
  auto self = PlanSend({.rank = 1, .size = 2}, 4, 1);
  EXPECT_EQ(self.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(self.status().message(), HasSubstr("peer 1 is this rank"));
  auto outside = PlanRecv({.rank = 1, .size = 2}, 4, -1);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.status().message(), HasSubstr("peer -1"));
  auto negative = PlanSend({.rank = 1, .size = 2}, -4, 0);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("bytes"));
}

TEST(NcclPlanTest, BarrierIsAOneFloatAllReduceInScratch) {
  auto plan = PlanBarrier({.rank = 0, .size = 3});
  ASSERT_TRUE(plan.ok());
  ExpectCalls(*plan, {Call(NcclCallKind::kAllReduce, Scr(), Scr(), 1,
                           WireType::kFloat32)});
  EXPECT_EQ(plan->scratch_bytes, 4);
  EXPECT_EQ(plan->payload_bytes, 0);
}

TEST(NcclPlanTest, CheckBuffersNamesTheNullBuffer) {
  auto plan = PlanAllGather({.rank = 0, .size = 2}, {1, 1}, DType::kFloat32);
  ASSERT_TRUE(plan.ok());
  float x[2];
  EXPECT_TRUE(CheckBuffers(*plan, x, x).ok());
  absl::Status no_input = CheckBuffers(*plan, nullptr, x);
  EXPECT_EQ(no_input.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_input.message(), HasSubstr("input is null"));
  absl::Status no_output = CheckBuffers(*plan, x, nullptr);
  EXPECT_THAT(no_output.message(), HasSubstr("output is null"));

  auto reduce = PlanAllReduce({.rank = 0, .size = 2}, 4, DType::kFloat32,
                              ReduceOp::kSum, ReductionOrder::kNccl);
  ASSERT_TRUE(reduce.ok());
  EXPECT_THAT(CheckBuffers(*reduce, nullptr, nullptr).message(),
              HasSubstr("buffer is null"));
  // Nothing to move: null is fine.
  auto empty = PlanAllReduce({.rank = 0, .size = 2}, 0, DType::kFloat32,
                             ReduceOp::kSum, ReductionOrder::kNccl);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(CheckBuffers(*empty, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace shardd::comm::nccl
