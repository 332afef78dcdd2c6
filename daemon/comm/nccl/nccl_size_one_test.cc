// Needs a GPU: tagged "gpu" and built only with --config=cuda. Run with
//   bazel test --config=cuda --test_tag_filters=gpu //daemon/comm/nccl/...
//
// What one GPU can show of the NCCL backend: a communicator of size 1 (NCCL
// refuses two ranks of one communicator on one GPU) through every operation,
// in every dtype and both reduction orders, out of place and in place, from
// the worker thread and on the caller's (OpOptions::caller_waits), for one
// element, an odd count and a count of several million. At size 1 every
// result is the input, through the same plans and kernels (upcast, copy,
// divide, downcast) that larger groups run, so the expected bits are the
// host's: the input, or its round trip through fp32 by the host's
// conversions (core::FloatToHalf, core::FloatToBFloat16) where the plan
// converts. nccl_collective_test covers the communicator's life cycle;
// multi-rank results need nccl_multiprocess_test and two GPUs.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/nccl/nccl_collective.h"
#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/comm/nccl/test_stores.h"
#include "daemon/core/dtype.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

using core::DType;
using testing::MapStore;

// A device buffer freed at scope exit; every copy waits for the device (the
// communicator's stream is non-blocking).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  void Put(const std::vector<uint8_t>& host) {
    ASSERT_EQ(host.size(), bytes_);
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<uint8_t> Get() const {
    std::vector<uint8_t> host(bytes_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

bool IsNonFiniteOrSubnormal(DType dtype, uint32_t bits) {
  switch (dtype) {
    case DType::kFloat32:
      return (bits & 0x7f800000u) == 0x7f800000u ||
             ((bits & 0x7f800000u) == 0 && (bits & 0x7fffffu) != 0);
    case DType::kBFloat16:
      return (bits & 0x7f80u) == 0x7f80u ||
             ((bits & 0x7f80u) == 0 && (bits & 0x7fu) != 0);
    case DType::kFloat16:
      return (bits & 0x7c00u) == 0x7c00u ||
             ((bits & 0x7c00u) == 0 && (bits & 0x3ffu) != 0);
  }
  return true;
}

// `n` elements of random bits. Plain: normal numbers and signed zeros only
// (what any order of summation and a division by 1 leave alone). Special:
// any bits, with NaNs (signed, with payloads), infinities, subnormals and
// signed zeros at the start.
std::vector<uint8_t> Elements(DType dtype, int64_t n, bool special,
                              uint32_t seed) {
  const int64_t size = core::DTypeSize(dtype);
  std::vector<uint8_t> out(n * size);
  std::mt19937 rng(seed);
  const std::vector<uint32_t> edges32 = {0x7fc00001u, 0xffa12345u, 0x7f800001u,
                                         0x7f800000u, 0xff800000u, 0x00000001u,
                                         0x807fffffu, 0x00000000u, 0x80000000u};
  const std::vector<uint32_t> edges16 =
      dtype == DType::kBFloat16
          ? std::vector<uint32_t>{0x7fc1u, 0xffa5u, 0x7f81u, 0x7f80u, 0xff80u,
                                  0x0001u, 0x807fu, 0x0000u, 0x8000u}
          : std::vector<uint32_t>{0x7e01u, 0xfd23u, 0x7c01u, 0x7c00u, 0xfc00u,
                                  0x0001u, 0x83ffu, 0x0000u, 0x8000u};
  const std::vector<uint32_t>& edges =
      dtype == DType::kFloat32 ? edges32 : edges16;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (size == 2) bits &= 0xffffu;
    if (special && i < static_cast<int64_t>(edges.size())) {
      bits = edges[i];
    } else if (!special) {
      while (IsNonFiniteOrSubnormal(dtype, bits)) {
        bits = static_cast<uint32_t>(rng());
        if (size == 2) bits &= 0xffffu;
      }
    }
    std::memcpy(out.data() + i * size, &bits, size);
  }
  return out;
}

// The host's round trip of each element through fp32 (what a plan that
// upcasts, copies and downcasts gives at size 1).
std::vector<uint8_t> ThroughFp32(DType dtype, const std::vector<uint8_t>& in) {
  if (dtype == DType::kFloat32) return in;
  std::vector<uint8_t> out(in.size());
  for (size_t i = 0; i < in.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, in.data() + i, 2);
    const uint16_t back = dtype == DType::kBFloat16
                              ? core::FloatToBFloat16(core::BFloat16ToFloat(h))
                              : core::FloatToHalf(core::HalfToFloat(h));
    std::memcpy(out.data() + i, &back, 2);
  }
  return out;
}

// The index of the first differing element, for messages; -1 if equal.
int64_t FirstDifference(DType dtype, const std::vector<uint8_t>& a,
                        const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  const size_t size = core::DTypeSize(dtype);
  for (size_t i = 0; i < a.size(); i += size) {
    if (std::memcmp(a.data() + i, b.data() + i, size) != 0) {
      return static_cast<int64_t>(i / size);
    }
  }
  return -1;
}

class NcclSizeOneTest
    : public ::testing::TestWithParam<std::tuple<DType, ReductionOrder>> {
 protected:
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess)
        << "this test needs a GPU";
    ASSERT_GT(devices, 0);
    NcclCollectiveOptions options;
    options.rank = 0;
    options.size = 1;
    options.epoch = 1;
    options.group = "one";
    options.connect_timeout = absl::Seconds(30);
    options.default_op_timeout = absl::Seconds(30);
    options.reduction_order = order();
    auto made = CreateNcclCollective(options, store_);
    ASSERT_TRUE(made.ok()) << made.status();
    comm_ = *std::move(made);
  }

  DType dtype() const { return std::get<0>(GetParam()); }
  ReductionOrder order() const { return std::get<1>(GetParam()); }

  MapStore store_;
  std::unique_ptr<Collective> comm_;
};

TEST_P(NcclSizeOneTest, EveryOperationGivesItsInputBackBitForBit) {
  const DType t = dtype();
  int64_t issued = 0;
  for (int64_t n : {int64_t{1}, int64_t{4099}, (int64_t{3} << 20) + 5}) {
    const std::vector<uint8_t> data =
        Elements(t, n, /*special=*/false, static_cast<uint32_t>(n));
    const std::vector<uint8_t> zeros(data.size(), 0);
    DeviceBuffer in(data.size()), out(data.size());
    for (bool caller_waits : {false, true}) {
      const OpOptions op{.timeout = absl::Seconds(30),
                         .caller_waits = caller_waits};
      const std::string where =
          absl::StrCat(core::DTypeName(t), " ", ReductionOrderName(order()),
                       " n=", n, caller_waits ? " caller_waits" : "");
      auto expect_out = [&](const DeviceBuffer& buffer, absl::string_view op) {
        EXPECT_EQ(FirstDifference(t, buffer.Get(), data), -1)
            << op << " " << where;
      };
      in.Put(data);
      out.Put(zeros);
      ASSERT_TRUE(
          comm_->AllGather(in.get(), out.get(), {n}, t, op)->Wait().ok())
          << where;
      expect_out(out, "AllGather");
      // In place: the input is this rank's part of the output.
      ASSERT_TRUE(comm_->AllGather(in.get(), in.get(), {n}, t, op)->Wait().ok())
          << where;
      expect_out(in, "AllGather in place");
      for (ReduceOp rop : {ReduceOp::kSum, ReduceOp::kAverage}) {
        const char* name = rop == ReduceOp::kSum ? "sum" : "average";
        out.Put(zeros);
        ASSERT_TRUE(comm_->ReduceScatter(in.get(), out.get(), {n}, t, rop, op)
                        ->Wait()
                        .ok())
            << name << " " << where;
        expect_out(out, absl::StrCat("ReduceScatter ", name));
        expect_out(in, absl::StrCat("ReduceScatter's input ", name));
        ASSERT_TRUE(comm_->AllReduce(in.get(), n, t, rop, op)->Wait().ok())
            << name << " " << where;
        expect_out(in, absl::StrCat("AllReduce ", name));
      }
      ASSERT_TRUE(comm_->Broadcast(in.get(), n, t, 0, op)->Wait().ok())
          << where;
      expect_out(in, "Broadcast");
      ASSERT_TRUE(comm_->Barrier(op)->Wait().ok()) << where;
      issued += 1;
    }
  }
  EXPECT_TRUE(comm_->AsyncError().ok()) << comm_->AsyncError();
  const CollectiveStats stats = comm_->Stats();
  EXPECT_EQ(stats.of(OpKind::kAllGather).calls, 2 * issued);
  EXPECT_EQ(stats.of(OpKind::kReduceScatter).calls, 2 * issued);
  EXPECT_EQ(stats.of(OpKind::kAllReduce).calls, 2 * issued);
  EXPECT_EQ(stats.of(OpKind::kBroadcast).calls, issued);
  EXPECT_EQ(stats.of(OpKind::kBarrier).calls, issued);
  for (OpKind kind :
       {OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllReduce,
        OpKind::kBroadcast, OpKind::kBarrier}) {
    EXPECT_EQ(stats.of(kind).failures, 0) << OpKindName(kind);
  }
}

// NaNs with payloads, infinities, subnormals and signed zeros: moved
// unchanged by the operations that only move bytes, and through fp32 by
// the host's conversions in the fixed-order sums (our upcast, copy and
// downcast kernels; no arithmetic at size 1). NCCL's own reductions and the
// average's division are left out: what they do to a NaN's payload is the
// hardware's (GPUs return the canonical NaN), not a rounding rule.
TEST_P(NcclSizeOneTest, SpecialValuesMoveBitForBit) {
  const DType t = dtype();
  constexpr int64_t kN = 1000;
  const std::vector<uint8_t> data = Elements(t, kN, /*special=*/true, 7);
  const std::vector<uint8_t> zeros(data.size(), 0);
  DeviceBuffer in(data.size()), out(data.size());
  in.Put(data);
  out.Put(zeros);
  ASSERT_TRUE(comm_->AllGather(in.get(), out.get(), {kN}, t)->Wait().ok());
  EXPECT_EQ(FirstDifference(t, out.Get(), data), -1) << "AllGather";
  ASSERT_TRUE(comm_->Broadcast(in.get(), kN, t, 0)->Wait().ok());
  EXPECT_EQ(FirstDifference(t, in.Get(), data), -1) << "Broadcast";
  if (order() != ReductionOrder::kFixed) return;
  const std::vector<uint8_t> want = ThroughFp32(t, data);
  out.Put(zeros);
  ASSERT_TRUE(comm_->ReduceScatter(in.get(), out.get(), {kN}, t, ReduceOp::kSum)
                  ->Wait()
                  .ok());
  EXPECT_EQ(FirstDifference(t, out.Get(), want), -1) << "ReduceScatter";
  ASSERT_TRUE(comm_->AllReduce(in.get(), kN, t, ReduceOp::kSum)->Wait().ok());
  EXPECT_EQ(FirstDifference(t, in.Get(), want), -1) << "AllReduce";
}

// Send and Recv need a peer: at size 1 they are refused before anything
// runs, and the communicator stays healthy.
TEST_P(NcclSizeOneTest, SendAndRecvToItselfAreRefusedWithoutHarm) {
  DeviceBuffer buf(64);
  EXPECT_EQ(comm_->Send(buf.get(), 64, 0, 1)->Wait().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Recv(buf.get(), 64, 0, 1)->Wait().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm_->AsyncError().ok());
  EXPECT_TRUE(comm_->Barrier()->Wait().ok());
  EXPECT_EQ(comm_->Stats().of(OpKind::kSend).failures, 1);
  EXPECT_EQ(comm_->Stats().of(OpKind::kRecv).failures, 1);
}

INSTANTIATE_TEST_SUITE_P(
    EveryDtypeAndOrder, NcclSizeOneTest,
    ::testing::Combine(
        ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
        ::testing::Values(ReductionOrder::kFixed, ReductionOrder::kNccl)),
    [](const ::testing::TestParamInfo<NcclSizeOneTest::ParamType>& info) {
      return absl::StrCat(core::DTypeName(std::get<0>(info.param)), "_",
                          ReductionOrderName(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace shardd::comm::nccl
