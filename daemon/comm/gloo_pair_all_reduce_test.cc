// The W = 2 all-reduces (GlooPairExchangeAllReduce, GlooPairAllReduce)
// through the communicator that runs them: a GlooCollective of two ranks.
// ChooseAllReduceAlgorithm exchanges up to 1 MiB and fuses above; BUILD
// runs this file three times: with that choice, and with
// SHARDD_ALL_REDUCE=exchange and =fused forcing one at every count.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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
using testing::Leave;

constexpr int kWorld = 2;
constexpr int64_t kMiBElements = (int64_t{1} << 20) / 4;

float Widen(const uint8_t* p, DType dtype) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == DType::kBFloat16 ? core::BFloat16ToFloat(h)
                                   : core::HalfToFloat(h);
}

void Narrow(float v, DType dtype, uint8_t* p) {
  const uint16_t h = dtype == DType::kBFloat16 ? core::FloatToBFloat16(v)
                                               : core::FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

// `count` random elements of `dtype` spanning several binades, so that
// most sums round (the bits then depend on doing exactly one addition).
std::vector<uint8_t> RandomElements(DType dtype, int64_t count,
                                    std::mt19937& rng) {
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  const int64_t size = core::DTypeSize(dtype);
  std::vector<uint8_t> bytes(count * size);
  for (int64_t i = 0; i < count; ++i) {
    const float v = std::ldexp(mantissa(rng), exponent(rng));
    if (dtype == DType::kFloat32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      Narrow(v, dtype, &bytes[i * 2]);
    }
  }
  return bytes;
}

// The reference: per element, the two inputs in fp32 added once, divided
// by 2 in fp32 for the average, rounded once to the dtype.
std::vector<uint8_t> ReferenceSum(DType dtype, ReduceOp op,
                                  const std::vector<uint8_t>& a,
                                  const std::vector<uint8_t>& b) {
  const int64_t size = core::DTypeSize(dtype);
  const int64_t count = static_cast<int64_t>(a.size()) / size;
  std::vector<uint8_t> out(a.size());
  for (int64_t i = 0; i < count; ++i) {
    float x, y;
    if (dtype == DType::kFloat32) {
      std::memcpy(&x, &a[i * 4], 4);
      std::memcpy(&y, &b[i * 4], 4);
    } else {
      x = Widen(&a[i * 2], dtype);
      y = Widen(&b[i * 2], dtype);
    }
    float sum = x + y;
    if (op == ReduceOp::kAverage) sum /= 2.0f;
    if (dtype == DType::kFloat32) {
      std::memcpy(&out[i * 4], &sum, 4);
    } else {
      Narrow(sum, dtype, &out[i * 2]);
    }
  }
  return out;
}

class GlooPairAllReduceTest : public ::testing::Test {};

// Even and odd counts: one element (rank 1's half empty), halves within
// one segment, halves of several 1 MiB segments that wrap the two-slot
// receive window (odd: the halves differ by one element, and the last
// segments by one), exactly 1 MiB and one element more (the exchange's
// limit), a large count first so that later ones reuse larger scratch.
// Every rank must hold the reference's bits.
TEST_F(GlooPairAllReduceTest, EqualsTheReferenceSumBitForBit) {
  Comms comms = testing::ConnectGroup(kWorld, absl::Seconds(60));
  std::mt19937 rng(2026);
  const std::vector<int64_t> counts = {10 * kMiBElements,
                                       1,
                                       2,
                                       3,
                                       37,
                                       kMiBElements / 2 + 1,
                                       kMiBElements,
                                       kMiBElements + 1,
                                       6 * kMiBElements + 1,
                                       4 * kMiBElements};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (int64_t count : counts) {
        std::vector<std::vector<uint8_t>> buffers = {
            RandomElements(dtype, count, rng),
            RandomElements(dtype, count, rng)};
        const std::vector<uint8_t> expected =
            ReferenceSum(dtype, op, buffers[0], buffers[1]);
        testing::ForEachRank(kWorld, [&](int r) {
          absl::Status s =
              comms[r]->AllReduce(buffers[r].data(), count, dtype, op)->Wait();
          EXPECT_TRUE(s.ok()) << s;
        });
        for (int r = 0; r < kWorld; ++r) {
          ASSERT_TRUE(buffers[r] == expected)
              << "rank " << r << " dtype " << core::DTypeName(dtype) << " op "
              << (op == ReduceOp::kSum ? "sum" : "average") << " count "
              << count;
        }
      }
    }
  }
  for (const auto& comm : comms) {
    EXPECT_EQ(comm->Stats().of(OpKind::kAllReduce).failures, 0);
    EXPECT_TRUE(comm->AsyncError().ok());
  }
}

class GlooPairAllReducePeerLossTest
    : public ::testing::TestWithParam<Departure> {};

// Rank 0 is inside the all-reduce (it has started and cannot finish: rank
// 1 never issues it) when rank 1 goes: rank 0 must fail, at once when the
// connection closes and at its deadline when the peer stays silent, and its
// communicator stays broken.
TEST_P(GlooPairAllReducePeerLossTest, TheSurvivorFailsWithinItsDeadline) {
  const absl::Duration timeout = absl::Seconds(2);
  Comms comms = testing::ConnectGroup(kWorld, timeout);
  std::vector<float> buf(8 * kMiBElements, 1.0f);
  const MonoTime start = MonoNow();
  std::shared_ptr<Work> work =
      comms[0]->AllReduce(buf.data(), static_cast<int64_t>(buf.size()),
                          DType::kFloat32, ReduceOp::kSum);
  const MonoTime until = start + absl::Seconds(10);
  while (comms[0]->Stats().of(OpKind::kAllReduce).calls == 0 &&
         MonoNow() < until) {
    absl::SleepFor(absl::Milliseconds(1));  // Polling with a deadline.
  }
  ASSERT_EQ(comms[0]->Stats().of(OpKind::kAllReduce).calls, 1);
  Leave(GetParam(), comms[1]);
  const absl::Status s = work->Wait();
  const absl::Duration elapsed = MonoNow() - start;
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
              s.code() == absl::StatusCode::kDeadlineExceeded)
      << s;
  EXPECT_LT(elapsed, timeout + absl::Milliseconds(1500));
  if (GetParam() != Departure::kSilent) {
    // A closed connection fails the wait before the deadline.
    EXPECT_LT(elapsed, timeout) << s;
  }
  EXPECT_FALSE(comms[0]->AsyncError().ok());
  EXPECT_EQ(comms[0]->Stats().of(OpKind::kAllReduce).failures, 1);
  std::shared_ptr<Work> later = comms[0]->Barrier();
  EXPECT_TRUE(later->Done());
  EXPECT_FALSE(later->Wait().ok());
  const MonoTime destroy = MonoNow();
  comms.clear();
  EXPECT_LT(MonoNow() - destroy, absl::Seconds(3));
}

INSTANTIATE_TEST_SUITE_P(Departures, GlooPairAllReducePeerLossTest,
                         ::testing::ValuesIn(AllDepartures()), DepartureName);

// Both ranks run a 64 MiB all-reduce and rank 1 is aborted as soon as its
// own has started, so segments are in flight both ways: neither may hang;
// rank 1 reports the abort, and rank 0 either finished first (then with
// the exact sums) or fails within its deadline.
TEST_F(GlooPairAllReduceTest, APeerAbortedMidExchangeEndsBothPromptly) {
  const absl::Duration timeout = absl::Seconds(5);
  Comms comms = testing::ConnectGroup(kWorld, timeout);
  const int64_t count = 16 * kMiBElements;
  std::vector<std::vector<float>> bufs = {std::vector<float>(count, 1.5f),
                                          std::vector<float>(count, 2.25f)};
  const MonoTime start = MonoNow();
  std::vector<std::shared_ptr<Work>> works(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    works[r] = comms[r]->AllReduce(bufs[r].data(), count, DType::kFloat32,
                                   ReduceOp::kSum);
  }
  const MonoTime until = start + absl::Seconds(10);
  while (comms[1]->Stats().of(OpKind::kAllReduce).calls == 0 &&
         MonoNow() < until) {
    absl::SleepFor(absl::Microseconds(100));  // Polling with a deadline.
  }
  comms[1]->Abort("dies mid-exchange");
  const absl::Status s1 = works[1]->Wait();
  const absl::Status s0 = works[0]->Wait();
  EXPECT_LT(MonoNow() - start, timeout + absl::Milliseconds(1500));
  EXPECT_TRUE(s1.ok() || s1.code() == absl::StatusCode::kAborted) << s1;
  if (s0.ok()) {
    for (int64_t i = 0; i < count; i += 4099) {
      ASSERT_EQ(bufs[0][i], 3.75f) << i;
    }
  } else {
    EXPECT_TRUE(s0.code() == absl::StatusCode::kUnavailable ||
                s0.code() == absl::StatusCode::kDeadlineExceeded)
        << s0;
    EXPECT_FALSE(comms[0]->AsyncError().ok());
  }
  const MonoTime destroy = MonoNow();
  comms.clear();
  EXPECT_LT(MonoNow() - destroy, absl::Seconds(3));
}

}  // namespace
}  // namespace shardd::comm
