// Needs a GPU: tagged "gpu" and built only with --config=cuda. Run with
//   bazel test --config=cuda --test_tag_filters=gpu //daemon/comm/nccl/...
//
// One process, one GPU: NCCL refuses two ranks of one communicator on the
// same GPU ("Duplicate GPU detected"), so these tests run communicators of
// size 1 (every op, through the plan executor and the fp32 kernels), and a
// size-2 communicator whose second rank never comes (the init deadline).
// nccl_multiprocess_test covers two ranks in two processes.
#include "daemon/comm/nccl/nccl_collective.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/comm/nccl/test_stores.h"
#include "daemon/core/cuda/cuda_context_api.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

using ::testing::HasSubstr;
using testing::MapStore;

// A device buffer freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  void* get() const { return ptr_; }
  template <typename T>
  void Put(const std::vector<T>& host) {
    ASSERT_EQ(host.size() * sizeof(T), bytes_);
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice),
              cudaSuccess);
    // From pageable memory the copy may return before the bytes land, and
    // the communicator's stream is non-blocking: wait for the device.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  template <typename T>
  std::vector<T> Get() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

class NcclCollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess)
        << "this test needs a GPU";
    ASSERT_GT(devices, 0);
  }

  std::unique_ptr<Collective> Solo(int64_t epoch = 1) {
    NcclCollectiveOptions options;
    options.rank = 0;
    options.size = 1;
    options.epoch = epoch;
    options.group = "solo";
    options.connect_timeout = absl::Seconds(30);
    options.default_op_timeout = absl::Seconds(30);
    auto made = CreateNcclCollective(options, store_);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *std::move(made) : nullptr;
  }

  MapStore store_;
};

std::vector<float> Iota(int n, float start) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i);
  return v;
}

// Issue #28 (4): building a communicator on a thread that never chose a
// device must leave that thread without a context, not bound to GPU 0's
// primary context (which a daemon of cuda:N would otherwise create).
TEST_F(NcclCollectiveTest, BuildingThreadIsGivenBackWithoutAContext) {
  const core::CudaContextApi& api = core::cuda::RealCudaContextApi();
  void* before = reinterpret_cast<void*>(1);
  void* after = reinterpret_cast<void*>(1);
  bool made = false;
  std::thread builder([&] {
    api.get_current(&before);
    std::unique_ptr<Collective> comm = Solo(/*epoch=*/7);
    made = comm != nullptr;
    api.get_current(&after);
  });
  builder.join();
  ASSERT_TRUE(made);
  EXPECT_EQ(before, nullptr) << "a fresh thread has no context";
  EXPECT_EQ(after, nullptr) << "the builder was left bound to a context";
}

// Issue #28 (6): scratch reserved up front is what operations use; a
// reservation the device cannot hold ends the communicator at once, before
// any operation is issued.
TEST_F(NcclCollectiveTest, ReservedScratchIsUsedAndAnImpossibleOneEndsIt) {
  auto comm = Solo(/*epoch=*/8);
  ASSERT_NE(comm, nullptr);
  ASSERT_TRUE(comm->ReserveScratch(1 << 20)->Wait().ok());
  EXPECT_EQ(comm->scratch_bytes(), 1 << 20);
  // A 16-bit reduction of 1000 elements needs 4000 bytes of fp32 scratch.
  DeviceBuffer buffer(1000 * 2);
  buffer.Put(std::vector<uint16_t>(1000, core::FloatToBFloat16(1.5f)));
  ASSERT_TRUE(comm->AllReduce(buffer.get(), 1000, core::DType::kBFloat16,
                              ReduceOp::kSum)
                  ->Wait()
                  .ok());
  EXPECT_EQ(comm->scratch_bytes(), 1 << 20) << "the reservation was replaced";

  auto doomed = Solo(/*epoch=*/9);
  ASSERT_NE(doomed, nullptr);
  const absl::Status reserved =
      doomed->ReserveScratch(int64_t{1} << 50)->Wait();  // 1 PiB
  EXPECT_EQ(reserved.code(), absl::StatusCode::kResourceExhausted) << reserved;
  EXPECT_FALSE(doomed->AsyncError().ok());
  EXPECT_FALSE(doomed->Barrier()->Wait().ok());
}

TEST_F(NcclCollectiveTest, SoloCommunicatorPublishesItsIdAndRunsEveryOp) {
  auto comm = Solo();
  ASSERT_NE(comm, nullptr);
  EXPECT_TRUE(store_.Get("nccl/0/epoch/1/solo/id").ok());
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->epoch(), 1);

  const std::vector<float> data = Iota(1000, -3.0f);
  DeviceBuffer in(data.size() * 4), out(data.size() * 4);
  in.Put(data);

  ASSERT_TRUE(
      comm->AllGather(in.get(), out.get(), {1000}, core::DType::kFloat32)
          ->Wait()
          .ok());
  EXPECT_EQ(out.Get<float>(), data);

  out.Put(std::vector<float>(1000, 0.0f));
  ASSERT_TRUE(comm->ReduceScatter(in.get(), out.get(), {1000},
                                  core::DType::kFloat32, ReduceOp::kAverage)
                  ->Wait()
                  .ok());
  EXPECT_EQ(out.Get<float>(), data);

  ASSERT_TRUE(
      comm->AllReduce(in.get(), 1000, core::DType::kFloat32, ReduceOp::kSum)
          ->Wait()
          .ok());
  EXPECT_EQ(in.Get<float>(), data);

  ASSERT_TRUE(
      comm->Broadcast(in.get(), 1000, core::DType::kFloat32, 0)->Wait().ok());
  EXPECT_EQ(in.Get<float>(), data);
  ASSERT_TRUE(comm->Barrier()->Wait().ok());
  EXPECT_TRUE(comm->AsyncError().ok());

  const CollectiveStats stats = comm->Stats();
  EXPECT_EQ(stats.of(OpKind::kAllGather).calls, 1);
  EXPECT_EQ(stats.of(OpKind::kAllGather).bytes, 4000);
  EXPECT_EQ(stats.of(OpKind::kReduceScatter).bytes, 4000);
  EXPECT_EQ(stats.of(OpKind::kBarrier).calls, 1);
  EXPECT_EQ(stats.of(OpKind::kBarrier).failures, 0);
}

TEST_F(NcclCollectiveTest, SixteenBitReductionsRoundTripThroughFp32Exactly) {
  auto comm = Solo();
  ASSERT_NE(comm, nullptr);
  // Every bf16 / fp16 value is exact in fp32: upcast, a size-1 reduction and
  // the downcast must give the input back bit for bit.
  std::vector<uint16_t> bf16, fp16;
  for (float x : Iota(512, -64.0f)) {
    bf16.push_back(core::FloatToBFloat16(x));
    fp16.push_back(core::FloatToHalf(x));
  }
  for (auto [dtype, host] : {std::pair{core::DType::kBFloat16, &bf16},
                             std::pair{core::DType::kFloat16, &fp16}}) {
    DeviceBuffer in(host->size() * 2), out(host->size() * 2);
    in.Put(*host);
    out.Put(std::vector<uint16_t>(host->size(), 0));
    ASSERT_TRUE(comm->ReduceScatter(in.get(), out.get(),
                                    {static_cast<int64_t>(host->size())}, dtype,
                                    ReduceOp::kAverage)
                    ->Wait()
                    .ok());
    EXPECT_EQ(out.Get<uint16_t>(), *host) << core::DTypeName(dtype);
    ASSERT_TRUE(comm->AllReduce(in.get(), static_cast<int64_t>(host->size()),
                                dtype, ReduceOp::kSum)
                    ->Wait()
                    .ok());
    EXPECT_EQ(in.Get<uint16_t>(), *host) << core::DTypeName(dtype);
  }
}

TEST_F(NcclCollectiveTest, InvalidArgumentsFailOnlyThatOperation) {
  auto comm = Solo();
  ASSERT_NE(comm, nullptr);
  DeviceBuffer buf(64);
  absl::Status bad =
      comm->AllGather(buf.get(), buf.get(), {4, 4}, core::DType::kFloat32)
          ->Wait();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("counts has 2 entries"));
  EXPECT_EQ(
      comm->Broadcast(buf.get(), 4, core::DType::kFloat32, 1)->Wait().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->AllReduce(nullptr, 4, core::DType::kFloat32, ReduceOp::kSum)
                ->Wait()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm->AsyncError().ok());
  EXPECT_TRUE(comm->Barrier()->Wait().ok());
  EXPECT_EQ(comm->Stats().of(OpKind::kAllGather).failures, 1);
}

TEST_F(NcclCollectiveTest,
       AbortFailsLaterOperationsWithAbortedAndIsIdempotent) {
  auto comm = Solo();
  ASSERT_NE(comm, nullptr);
  comm->Abort("membership changed");
  comm->Abort("again");
  const absl::Status error = comm->AsyncError();
  EXPECT_EQ(error.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(error.message(), HasSubstr("membership changed"));
  std::shared_ptr<Work> work = comm->Barrier();
  EXPECT_TRUE(work->Done());
  EXPECT_EQ(work->Wait(), error);
  EXPECT_EQ(work->Wait(), error);
  // The next epoch gets a new communicator.
  auto next = Solo(2);
  ASSERT_NE(next, nullptr);
  EXPECT_TRUE(next->Barrier()->Wait().ok());
}

TEST_F(NcclCollectiveTest, ManyQueuedOperationsRunInIssueOrder) {
  auto comm = Solo();
  ASSERT_NE(comm, nullptr);
  DeviceBuffer buf(4 * 256);
  buf.Put(Iota(256, 1.0f));
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 100; ++i) {
    works.push_back(
        comm->AllReduce(buf.get(), 256, core::DType::kFloat32, ReduceOp::kSum));
  }
  for (auto& w : works) EXPECT_TRUE(w->Wait().ok());
  EXPECT_EQ(buf.Get<float>(), Iota(256, 1.0f));
  EXPECT_EQ(comm->Stats().of(OpKind::kAllReduce).calls, 100);
}

TEST_F(NcclCollectiveTest, InitWithAMissingPeerEndsAtTheConnectDeadline) {
  // Rank 1 of this size-2 communicator never comes: the non-blocking init
  // must give up at the deadline (and ncclCommAbort must not hang).
  NcclCollectiveOptions options;
  options.rank = 0;
  options.size = 2;
  options.epoch = 9;
  options.group = "lonely";
  options.connect_timeout = absl::Seconds(3);
  const MonoTime start = MonoNow();
  auto made = CreateNcclCollective(options, store_);
  const absl::Duration took = MonoNow() - start;
  EXPECT_EQ(made.status().code(), absl::StatusCode::kDeadlineExceeded)
      << made.status();
  EXPECT_LT(took, absl::Seconds(3) + absl::Seconds(5));
}

TEST_F(NcclCollectiveTest, RankWaitingForAnIdThatNeverComesTimesOut) {
  NcclCollectiveOptions options;
  options.rank = 1;
  options.size = 2;
  options.epoch = 10;
  options.group = "nobody";
  options.connect_timeout = absl::Milliseconds(200);
  auto made = CreateNcclCollective(options, store_);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(made.status().message(), HasSubstr("nccl/0/epoch/10/nobody/id"));
}

}  // namespace
}  // namespace shardd::comm::nccl
