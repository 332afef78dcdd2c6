#include "daemon/comm/nccl/nccl_unique_id.h"

#include <cctype>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "daemon/comm/nccl/test_stores.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

using ::testing::HasSubstr;

using testing::MapStore;

NcclUniqueIdBytes SampleId() {
  NcclUniqueIdBytes id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 37);
  return id;
}

UniqueIdExchange Exchange(int rank) {
  return UniqueIdExchange{
      .rank = rank, .epoch = 7, .group = "shard0", .timeout = absl::Seconds(5)};
}

TEST(NcclUniqueIdTest, KeyIsScopedByEpochAndGroupAndOwnedByRankZero) {
  EXPECT_EQ(NcclUniqueIdKey(5, 3, "replica1"), "nccl/5/epoch/3/replica1/id");
}

TEST(NcclUniqueIdTest, RankZeroWritesUnderItsJobRankAndOthersReadThere) {
  MapStore store;
  UniqueIdExchange root = Exchange(0);
  root.root_job_rank = 6;
  ASSERT_TRUE(ExchangeNcclUniqueId(store, root, [] {
                return absl::StatusOr<NcclUniqueIdBytes>(SampleId());
              }).ok());
  EXPECT_TRUE(store.Get("nccl/6/epoch/7/shard0/id").ok());
  UniqueIdExchange other = Exchange(1);
  other.root_job_rank = 6;
  auto id = ExchangeNcclUniqueId(store, other, nullptr);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, SampleId());
}

TEST(NcclUniqueIdTest, EncodeDecodeRoundTripsEveryByte) {
  const NcclUniqueIdBytes id = SampleId();
  const std::string text = EncodeNcclUniqueId(id);
  EXPECT_EQ(text.size(), 256u);
  EXPECT_EQ(text.substr(0, 6), "00254a");
  auto back = DecodeNcclUniqueId(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, id);
}

TEST(NcclUniqueIdTest, DecodeAcceptsUppercaseHex) {
  std::string text = EncodeNcclUniqueId(SampleId());
  for (char& c : text) c = static_cast<char>(std::toupper(c));
  auto back = DecodeNcclUniqueId(text);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, SampleId());
}

TEST(NcclUniqueIdTest, RejectsAUniqueIdOfTheWrongLength) {
  const std::string text = EncodeNcclUniqueId(SampleId());
  auto shorter = DecodeNcclUniqueId(text.substr(0, 254));
  EXPECT_EQ(shorter.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(shorter.status().message(), HasSubstr("got 254"));
  EXPECT_EQ(DecodeNcclUniqueId(text + "00").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeNcclUniqueId("").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(NcclUniqueIdTest, RejectsMalformedUniqueId) {
  std::string text = EncodeNcclUniqueId(SampleId());
  text[101] = 'g';
  auto bad = DecodeNcclUniqueId(text);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bad.status().message(), HasSubstr("character 101"));
}

TEST(NcclUniqueIdTest, RankZeroCreatesAndOthersReadTheSameId) {
  MapStore store;
  int created = 0;
  auto create = [&]() -> absl::StatusOr<NcclUniqueIdBytes> {
    ++created;
    return SampleId();
  };
  // The others start first and wait for rank 0.
  std::vector<absl::StatusOr<NcclUniqueIdBytes>> got(4);
  std::vector<std::thread> others;
  for (int r = 1; r < 4; ++r) {
    others.emplace_back([&, r] {
      got[r] = ExchangeNcclUniqueId(store, Exchange(r), [] {
        return absl::StatusOr<NcclUniqueIdBytes>(
            absl::InternalError("only rank 0 creates the id"));
      });
    });
  }
  got[0] = ExchangeNcclUniqueId(store, Exchange(0), create);
  for (std::thread& t : others) t.join();
  EXPECT_EQ(created, 1);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
    EXPECT_EQ(*got[r], SampleId()) << "rank " << r;
  }
  auto stored = store.Get("nccl/0/epoch/7/shard0/id");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(*stored, EncodeNcclUniqueId(SampleId()));
}

TEST(NcclUniqueIdTest, WaitingPastTheConnectDeadlineIsDeadlineExceeded) {
  MapStore store;
  UniqueIdExchange exchange = Exchange(2);
  exchange.timeout = absl::Milliseconds(1);
  auto id = ExchangeNcclUniqueId(store, exchange, nullptr);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(id.status().message(), HasSubstr("nccl/0/epoch/7/shard0/id"));
}

TEST(NcclUniqueIdTest, AnIdOfAnotherEpochIsNotRead) {
  MapStore store;
  ASSERT_TRUE(
      store.Set(NcclUniqueIdKey(0, 6, "shard0"), EncodeNcclUniqueId(SampleId()))
          .ok());
  UniqueIdExchange exchange = Exchange(1);
  exchange.timeout = absl::Milliseconds(1);
  EXPECT_EQ(ExchangeNcclUniqueId(store, exchange, nullptr).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(NcclUniqueIdTest, AMalformedStoredValueIsDataLossNamingTheKey) {
  MapStore store;
  ASSERT_TRUE(store.Set("nccl/0/epoch/7/shard0/id", "not an id").ok());
  auto id = ExchangeNcclUniqueId(store, Exchange(1), nullptr);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(id.status().message(), HasSubstr("nccl/0/epoch/7/shard0/id"));
}

TEST(NcclUniqueIdTest, RankZeroReportsCreateAndStoreFailures) {
  MapStore store;
  auto failed_create = ExchangeNcclUniqueId(store, Exchange(0), [] {
    return absl::StatusOr<NcclUniqueIdBytes>(
        absl::InternalError("ncclGetUniqueId: ncclSystemError"));
  });
  EXPECT_EQ(failed_create.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(failed_create.status().message(), HasSubstr("ncclGetUniqueId"));

  store.FailSets(absl::UnavailableError("store unreachable"));
  auto failed_set = ExchangeNcclUniqueId(store, Exchange(0), [] {
    return absl::StatusOr<NcclUniqueIdBytes>(SampleId());
  });
  EXPECT_EQ(failed_set.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed_set.status().message(),
              HasSubstr("nccl/0/epoch/7/shard0/id"));
}

TEST(NcclUniqueIdTest, RejectsGroupNamesThatWouldBreakTheKey) {
  MapStore store;
  UniqueIdExchange exchange = Exchange(1);
  exchange.group = "a/b";
  auto id = ExchangeNcclUniqueId(store, exchange, nullptr);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), HasSubstr("group 'a/b'"));
  EXPECT_EQ(ValidateGroupName("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateGroupName("replica-0.shard_1").ok());
}

}  // namespace
}  // namespace shardd::comm::nccl
