#include "daemon/node/epoch_communicators.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

// A communicator that only records its aborts and reports a settable async
// error; its operations are not used here.
class AbortRecorder final : public comm::Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int64_t epoch() const override { return 0; }
  std::shared_ptr<comm::Work> AllGather(const void*, void*,
                                        const std::vector<int64_t>&,
                                        core::DType,
                                        const comm::OpOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> ReduceScatter(const void*, void*,
                                            const std::vector<int64_t>&,
                                            core::DType, comm::ReduceOp,
                                            const comm::OpOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> AllReduce(void*, int64_t, core::DType,
                                        comm::ReduceOp,
                                        const comm::OpOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> Broadcast(void*, int64_t, core::DType, int,
                                        const comm::OpOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> Send(const void*, int64_t, int, uint32_t,
                                   const comm::OpOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> Recv(void*, int64_t, int, uint32_t,
                                   const comm::OpOptions&) override {
    return nullptr;
  }
  std::shared_ptr<comm::Work> Barrier(const comm::OpOptions&) override {
    return nullptr;
  }
  void Abort(absl::string_view reason) override { aborts.emplace_back(reason); }
  absl::Status AsyncError() const override { return async_error; }
  comm::CollectiveStats Stats() const override { return {}; }

  std::vector<std::string> aborts;
  absl::Status async_error;
};

class EpochCommunicatorsTest : public ::testing::Test {
 protected:
  void Install(int64_t epoch) {
    shard_ = std::make_shared<AbortRecorder>();
    replica_ = std::make_shared<AbortRecorder>();
    comms_.Install(epoch, shard_, replica_);
  }
  EpochCommunicators comms_;
  std::shared_ptr<AbortRecorder> shard_;
  std::shared_ptr<AbortRecorder> replica_;
};

TEST_F(EpochCommunicatorsTest, NoneUntilTheFirstEpochIsInstalled) {
  EXPECT_EQ(comms_.epoch(), 0);
  EXPECT_FALSE(comms_.healthy());
  EXPECT_EQ(comms_.ReplicaGroupOf(0), nullptr);
  EXPECT_FALSE(comms_.Supersede(0, "nothing"));
  EXPECT_TRUE(comms_.Supersede(1, "epoch 0 superseded by 1"));  // No groups.
  Install(1);
  EXPECT_TRUE(comms_.healthy());
  EXPECT_EQ(comms_.ReplicaGroupOf(1), replica_);
}

TEST_F(EpochCommunicatorsTest, ANewerEpochAbortsBothGroupsWithItsReason) {
  Install(3);
  EXPECT_FALSE(comms_.Supersede(3, "same epoch"));
  EXPECT_TRUE(shard_->aborts.empty());
  EXPECT_TRUE(comms_.Supersede(4, "epoch 3 superseded by 4: member left"));
  EXPECT_FALSE(comms_.healthy());
  EXPECT_EQ(comms_.error(), "epoch 3 superseded by 4: member left");
  EXPECT_EQ(shard_->aborts,
            std::vector<std::string>{"epoch 3 superseded by 4: member left"});
  EXPECT_EQ(replica_->aborts, shard_->aborts);
  EXPECT_EQ(comms_.ReplicaGroupOf(3), nullptr);
}

TEST_F(EpochCommunicatorsTest, TheFirstFailureReasonIsKept) {
  Install(3);
  EXPECT_TRUE(comms_.Abandon(3, "AllGather: peer 2 closed the connection"));
  EXPECT_TRUE(comms_.Supersede(4, "epoch 3 superseded by 4"));
  EXPECT_EQ(comms_.error(), "AllGather: peer 2 closed the connection");
  EXPECT_EQ(shard_->aborts.size(), 2u);  // Abort is idempotent; both told.
}

TEST_F(EpochCommunicatorsTest, AFailureOfAReplacedEpochChangesNothing) {
  Install(5);
  EXPECT_FALSE(comms_.Abandon(4, "late failure of epoch 4"));
  EXPECT_TRUE(comms_.healthy());
  EXPECT_TRUE(shard_->aborts.empty());
}

TEST_F(EpochCommunicatorsTest, MarkFailedReplacesTheReasonWithoutAborting) {
  Install(2);
  comms_.MarkFailed("epoch 2: communicators: peer 1 unreachable");
  comms_.MarkFailed("checkpoint read failed");
  EXPECT_EQ(comms_.error(), "checkpoint read failed");
  EXPECT_FALSE(comms_.healthy());
  EXPECT_TRUE(shard_->aborts.empty());
  Install(3);  // The next epoch's are healthy again.
  EXPECT_TRUE(comms_.healthy());
  EXPECT_EQ(comms_.error(), "");
}

TEST_F(EpochCommunicatorsTest, AReplicaGroupWithAnAsyncErrorIsNotLent) {
  Install(7);
  replica_->async_error = absl::AbortedError("peer gone");
  EXPECT_EQ(comms_.ReplicaGroupOf(7), nullptr);
  EXPECT_TRUE(comms_.healthy());  // The owner learns it from the work.
}

TEST_F(EpochCommunicatorsTest, AbortAllKeepsTheHealthAsItIs) {
  Install(1);
  comms_.AbortAll("node shutting down");
  EXPECT_EQ(shard_->aborts, std::vector<std::string>{"node shutting down"});
  EXPECT_EQ(replica_->aborts, shard_->aborts);
  comms_.Clear();
  EXPECT_EQ(comms_.shard_group(), nullptr);
  EXPECT_EQ(comms_.replica_group(), nullptr);
}

}  // namespace
}  // namespace shardd::node
