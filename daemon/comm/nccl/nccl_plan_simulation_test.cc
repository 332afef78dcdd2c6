// Runs the fixed-order plans of every rank of a group on host memory, with
// a small interpreter standing in for NCCL's point-to-point calls and
// broadcasts and for our kernels (their CPU twins round the same way), and
// compares the results bit for bit with the Gloo backend's ring order: what
// the GPUs will compute, checked without a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/core/dtype.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

using core::DType;

// One rank's memory. With `in_place`, the output is this rank's block of
// the input, as the step engine passes it.
struct RankMemory {
  std::vector<uint8_t> input, output, scratch;
  bool in_place = false;
  int64_t in_place_offset = 0;  // bytes into `input`

  uint8_t* At(const BufferRef& ref) {
    switch (ref.base) {
      case BufferBase::kNone:
        return nullptr;
      case BufferBase::kInput:
        return input.data() + ref.byte_offset;
      case BufferBase::kOutput:
        return (in_place ? input.data() + in_place_offset : output.data()) +
               ref.byte_offset;
      case BufferBase::kScratch:
        return scratch.data() + ref.byte_offset;
    }
    return nullptr;
  }
};

float Load(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
void Store(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void Store16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

bool IsCommunication(NcclCallKind kind) {
  switch (kind) {
    case NcclCallKind::kUpcast:
    case NcclCallKind::kDowncast:
    case NcclCallKind::kDivide:
    case NcclCallKind::kAdd:
    case NcclCallKind::kCopy:
      return false;
    default:
      return true;
  }
}

void RunKernel(const NcclCall& call, RankMemory& m) {
  uint8_t* src = m.At(call.send);
  uint8_t* dst = m.At(call.recv);
  const bool bf16 = call.type == WireType::kBFloat16;
  for (int64_t i = 0; i < call.count; ++i) {
    switch (call.kind) {
      case NcclCallKind::kUpcast: {
        const uint16_t h = Load16(src + 2 * i);
        Store(dst + 4 * i,
              bf16 ? core::BFloat16ToFloat(h) : core::HalfToFloat(h));
        break;
      }
      case NcclCallKind::kDowncast: {
        const float f = Load(src + 4 * i);
        Store16(dst + 2 * i,
                bf16 ? core::FloatToBFloat16(f) : core::FloatToHalf(f));
        break;
      }
      case NcclCallKind::kDivide:
        Store(dst + 4 * i,
              Load(dst + 4 * i) / static_cast<float>(call.divisor));
        break;
      case NcclCallKind::kAdd:
        Store(dst + 4 * i, Load(dst + 4 * i) + Load(src + 4 * i));
        break;
      case NcclCallKind::kCopy:
        std::memmove(dst, src, static_cast<size_t>(call.count) * 4);
        return;
      default:
        FAIL() << "not a kernel: " << DescribeCall(call);
    }
  }
}

// Executes one communication phase (a group, or one bare collective) that
// every rank has reached: all sends and roots' data are read first, then
// delivered, as NCCL's grouped calls behave.
void RunPhase(const std::vector<std::vector<NcclCall>>& phase,
              std::vector<RankMemory>& mem) {
  const int w = static_cast<int>(phase.size());
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> wire;
  std::map<int, std::vector<uint8_t>> rooted;  // broadcast data by root
  std::vector<std::vector<uint8_t>> gathered(w);
  for (int r = 0; r < w; ++r) {
    for (const NcclCall& call : phase[r]) {
      const int64_t bytes = call.count * WireTypeSize(call.type);
      const uint8_t* src = mem[r].At(call.send);
      switch (call.kind) {
        case NcclCallKind::kSend:
          wire[{r, call.peer}].emplace_back(src, src + bytes);
          break;
        case NcclCallKind::kBroadcast:
          if (call.root == r) rooted[r].assign(src, src + bytes);
          break;
        case NcclCallKind::kAllGather:
          gathered[r].assign(src, src + bytes);
          break;
        case NcclCallKind::kRecv:
          break;
        default:
          FAIL() << "not simulated: " << DescribeCall(call);
      }
    }
  }
  for (int r = 0; r < w; ++r) {
    for (const NcclCall& call : phase[r]) {
      const int64_t bytes = call.count * WireTypeSize(call.type);
      uint8_t* dst = mem[r].At(call.recv);
      if (call.kind == NcclCallKind::kRecv) {
        auto& queue = wire[{call.peer, r}];
        ASSERT_FALSE(queue.empty()) << "rank " << r << " receives from "
                                    << call.peer << " but nothing was sent";
        ASSERT_EQ(static_cast<int64_t>(queue.front().size()), bytes)
            << "rank " << r << " from " << call.peer;
        std::memcpy(dst, queue.front().data(), bytes);
        queue.pop_front();
      } else if (call.kind == NcclCallKind::kBroadcast) {
        ASSERT_EQ(rooted.count(call.root), 1u) << "root " << call.root;
        ASSERT_EQ(static_cast<int64_t>(rooted[call.root].size()), bytes);
        std::memcpy(dst, rooted[call.root].data(), bytes);
      } else if (call.kind == NcclCallKind::kAllGather) {
        for (int q = 0; q < w; ++q) {
          ASSERT_EQ(static_cast<int64_t>(gathered[q].size()), bytes);
          std::memcpy(dst + q * bytes, gathered[q].data(), bytes);
        }
      }
    }
  }
  for (const auto& [pair, queue] : wire) {
    EXPECT_TRUE(queue.empty()) << "rank " << pair.first << " sent to "
                               << pair.second << " what it never received";
  }
}

// Runs every rank's plan: local calls at once, communication in lockstep.
void Simulate(const std::vector<NcclPlan>& plans,
              std::vector<RankMemory>& mem) {
  const int w = static_cast<int>(plans.size());
  std::vector<size_t> pc(w, 0);
  for (int round = 0; round < 64; ++round) {
    int finished = 0;
    std::vector<std::vector<NcclCall>> phase(w);
    for (int r = 0; r < w; ++r) {
      const std::vector<NcclCall>& calls = plans[r].calls;
      while (pc[r] < calls.size() && !IsCommunication(calls[pc[r]].kind)) {
        RunKernel(calls[pc[r]++], mem[r]);
      }
      if (pc[r] == calls.size()) {
        ++finished;
        continue;
      }
      if (calls[pc[r]].kind == NcclCallKind::kGroupStart) {
        for (++pc[r]; calls[pc[r]].kind != NcclCallKind::kGroupEnd; ++pc[r]) {
          phase[r].push_back(calls[pc[r]]);
        }
        ++pc[r];
      } else {
        phase[r].push_back(calls[pc[r]++]);
      }
    }
    if (finished == w) return;
    ASSERT_EQ(finished, 0) << "some ranks finished while others communicate";
    RunPhase(phase, mem);
  }
  FAIL() << "plans did not finish";
}

std::vector<float> RandomValues(int64_t n, std::mt19937& rng) {
  // Magnitudes over six decades: the order of additions shows in the bits.
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-3, 3);
  std::vector<float> v(n);
  for (float& x : v) x = mantissa(rng) * std::pow(10.0f, exponent(rng));
  return v;
}

std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * core::DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kFloat32) {
      Store(&out[4 * i], values[i]);
    } else {
      Store16(&out[2 * i], dtype == DType::kBFloat16
                               ? core::FloatToBFloat16(values[i])
                               : core::FloatToHalf(values[i]));
    }
  }
  return out;
}

std::vector<float> Decode(DType dtype, const std::vector<uint8_t>& bytes) {
  const int64_t es = core::DTypeSize(dtype);
  std::vector<float> out(bytes.size() / es);
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == DType::kFloat32) {
      out[i] = Load(&bytes[4 * i]);
    } else {
      const uint16_t h = Load16(&bytes[2 * i]);
      out[i] = dtype == DType::kBFloat16 ? core::BFloat16ToFloat(h)
                                         : core::HalfToFloat(h);
    }
  }
  return out;
}

// Block b of the Gloo ring: in[b+1] + in[b+2] + ... + in[b], in fp32, one
// rounding per addition (then / W for the average), rounded once to dtype.
std::vector<uint8_t> RingBlock(const std::vector<std::vector<float>>& in,
                               int64_t offset, int64_t count, int b,
                               ReduceOp op, DType dtype) {
  const int w = static_cast<int>(in.size());
  std::vector<float> sum(count);
  for (int64_t i = 0; i < count; ++i) {
    float acc = in[(b + 1) % w][offset + i];
    for (int k = 2; k <= w; ++k) acc = acc + in[(b + k) % w][offset + i];
    if (op == ReduceOp::kAverage) acc = acc / static_cast<float>(w);
    sum[i] = acc;
  }
  return Encode(dtype, sum);
}

struct Case {
  int w;
  DType dtype;
  ReduceOp op;
};

std::string Name(const Case& c) {
  return absl::StrCat("W=", c.w, " ", core::DTypeName(c.dtype),
                      c.op == ReduceOp::kAverage ? " avg" : " sum");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int w : {2, 3, 4, 5}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        cases.push_back({w, dtype, op});
      }
    }
  }
  return cases;
}

TEST(NcclPlanSimulationTest, FixedReduceScatterEqualsTheRingBitForBit) {
  std::mt19937 rng(7);
  for (const Case& c : Cases()) {
    for (bool in_place : {false, true}) {
      // Uneven, with an empty block when W > 2.
      std::vector<int64_t> counts(c.w);
      for (int r = 0; r < c.w; ++r)
        counts[r] = (r == 1 && c.w > 2) ? 0 : 37 + 11 * r;
      std::vector<int64_t> offsets(c.w + 1, 0);
      for (int r = 0; r < c.w; ++r) offsets[r + 1] = offsets[r] + counts[r];
      const int64_t es = core::DTypeSize(c.dtype);
      std::vector<std::vector<float>> values(c.w);
      std::vector<RankMemory> mem(c.w);
      std::vector<NcclPlan> plans;
      for (int r = 0; r < c.w; ++r) {
        // What the rank holds, as its dtype, and as fp32 for the reference.
        values[r] =
            Decode(c.dtype, Encode(c.dtype, RandomValues(offsets[c.w], rng)));
        mem[r].input = Encode(c.dtype, values[r]);
        mem[r].output.assign(counts[r] * es, 0xEE);
        mem[r].in_place = in_place;
        mem[r].in_place_offset = offsets[r] * es;
        auto plan = PlanReduceScatter({.rank = r, .size = c.w}, counts, c.dtype,
                                      c.op, ReductionOrder::kFixed);
        ASSERT_TRUE(plan.ok()) << plan.status();
        mem[r].scratch.assign(plan->scratch_bytes, 0xAB);
        plans.push_back(*plan);
      }
      Simulate(plans, mem);
      for (int r = 0; r < c.w; ++r) {
        const std::vector<uint8_t> want =
            RingBlock(values, offsets[r], counts[r], r, c.op, c.dtype);
        const uint8_t* got = mem[r].At(BufferRef{BufferBase::kOutput, 0});
        EXPECT_EQ(std::vector<uint8_t>(got, got + want.size()), want)
            << Name(c) << (in_place ? " in place" : "") << " rank " << r;
      }
    }
  }
}

TEST(NcclPlanSimulationTest, FixedAllReduceEqualsTheRingOnEveryRank) {
  std::mt19937 rng(11);
  for (const Case& c : Cases()) {
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1001}}) {
      const int64_t es = core::DTypeSize(c.dtype);
      std::vector<std::vector<float>> values(c.w);
      std::vector<RankMemory> mem(c.w);
      std::vector<NcclPlan> plans;
      for (int r = 0; r < c.w; ++r) {
        values[r] = Decode(c.dtype, Encode(c.dtype, RandomValues(count, rng)));
        mem[r].output = Encode(c.dtype, values[r]);  // in place
        auto plan = PlanAllReduce({.rank = r, .size = c.w}, count, c.dtype,
                                  c.op, ReductionOrder::kFixed);
        ASSERT_TRUE(plan.ok()) << plan.status();
        mem[r].scratch.assign(plan->scratch_bytes, 0xAB);
        plans.push_back(*plan);
      }
      Simulate(plans, mem);
      // The Gloo backend's even split: the first count % W ranks get one
      // more element; block b summed in ring order from b + 1.
      std::vector<uint8_t> want;
      int64_t offset = 0;
      for (int b = 0; b < c.w; ++b) {
        const int64_t n = count / c.w + (b < count % c.w ? 1 : 0);
        const std::vector<uint8_t> block =
            RingBlock(values, offset, n, b, c.op, c.dtype);
        want.insert(want.end(), block.begin(), block.end());
        offset += n;
      }
      ASSERT_EQ(static_cast<int64_t>(want.size()), count * es);
      for (int r = 0; r < c.w; ++r) {
        EXPECT_EQ(mem[r].output, want)
            << Name(c) << " count " << count << " rank " << r;
      }
    }
  }
}

// The comparison above can tell orders apart: with these inputs, summing
// in rank order instead of ring order changes some bits.
TEST(NcclPlanSimulationTest, TheRingOrderIsDistinguishableFromRankOrder) {
  std::mt19937 rng(7);
  constexpr int kWorld = 4;
  constexpr int64_t kCount = 1000;
  std::vector<std::vector<float>> in(kWorld);
  for (auto& v : in) v = RandomValues(kCount, rng);
  int differing = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    float ring = in[1][i];
    for (int k = 2; k <= kWorld; ++k) ring = ring + in[k % kWorld][i];
    float rank_order = in[0][i];
    for (int k = 1; k < kWorld; ++k) rank_order = rank_order + in[k][i];
    differing += ring != rank_order;
  }
  EXPECT_GT(differing, 10);
}

}  // namespace
}  // namespace shardd::comm::nccl
