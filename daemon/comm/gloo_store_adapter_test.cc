#include "daemon/comm/gloo_store_adapter.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/comm/in_memory_store.h"
#include "daemon/comm/status_exception.h"
#include "daemon/core/mono_time.h"
#include "daemon/core/rendezvous_key.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

TEST(GlooStoreAdapterTest, GlooKeysNameTheirWriterFirst) {
  EXPECT_EQ(*GlooStoreAdapter::GlooKeyWriter("0"), 0);
  EXPECT_EQ(*GlooStoreAdapter::GlooKeyWriter("12"), 12);
  EXPECT_EQ(*GlooStoreAdapter::GlooKeyWriter("rank_3"), 3);
  EXPECT_EQ(*GlooStoreAdapter::GlooKeyWriter("2/5"), 2);  // Older Gloo.
  for (const char* key : {"", "rank_", "x1", "1x", "rank_x", "-1"}) {
    EXPECT_EQ(GlooStoreAdapter::GlooKeyWriter(key).status().code(),
              absl::StatusCode::kInternal)
        << key;
  }
}

TEST(GlooStoreAdapterTest, StoreKeysAreOwnedByTheWritersJobRank) {
  InMemoryStore store;
  // Replica group 1 at W = 4, F = 2: group ranks 0, 1 are job ranks 1, 3.
  GlooStoreAdapter adapter(store, 7, "replica/1", {1, 3}, MonoNow());
  EXPECT_EQ(*adapter.StoreKey("1"), "gloo/3/epoch/7/replica/1/1");
  EXPECT_EQ(*adapter.StoreKey("rank_0"), "gloo/1/epoch/7/replica/1/rank_0");
  EXPECT_EQ(adapter.StoreKey("2").status().code(), absl::StatusCode::kInternal);
  // Without a mapping, group ranks are job ranks.
  GlooStoreAdapter world(store, 7, "world", {}, MonoNow());
  EXPECT_EQ(*world.StoreKey("rank_2"), "gloo/2/epoch/7/world/rank_2");
}

// Records the keys one rank's adapter writes, over a shared store.
class RecordingStore : public Store {
 public:
  explicit RecordingStore(Store& inner) : inner_(inner) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    {
      absl::MutexLock lock(&mu_);
      written_.emplace_back(key);
    }
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key) override {
    return inner_.Get(key);
  }
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override {
    return inner_.Wait(keys, timeout);
  }
  std::vector<std::string> written() {
    absl::MutexLock lock(&mu_);
    return written_;
  }

 private:
  Store& inner_;
  absl::Mutex mu_;
  std::vector<std::string> written_ ABSL_GUARDED_BY(mu_);
};

TEST(GlooStoreAdapterTest, EveryKeyGlooWritesIsOwnedByItsWriter) {
  // A real Gloo rendezvous of three ranks, job ranks 4, 0 and 2: whatever
  // keys this Gloo writes, each must belong to the rank that writes it
  // (else the coordinator refuses the write).
  const std::vector<int> job_ranks = {4, 0, 2};
  InMemoryStore shared;
  std::vector<std::unique_ptr<RecordingStore>> stores;
  for (size_t r = 0; r < job_ranks.size(); ++r) {
    stores.push_back(std::make_unique<RecordingStore>(shared));
  }
  std::vector<std::string> errors(job_ranks.size());
  // Kept until every rank has connected: a rank whose connectFullMesh
  // returned first would otherwise close its pairs while a peer is still
  // finishing the handshake with it ("Connection closed by peer").
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(
      job_ranks.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(job_ranks.size()); ++r) {
    threads.emplace_back([&, r] {
      try {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(
            r, static_cast<int>(job_ranks.size()));
        context->setTimeout(std::chrono::seconds(20));
        GlooStoreAdapter adapter(*stores[r], 5, "shard/0", job_ranks,
                                 MonoNow() + absl::Seconds(20));
        context->connectFullMesh(adapter, device);
        contexts[r] = std::move(context);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  contexts.clear();
  for (size_t r = 0; r < job_ranks.size(); ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    const std::vector<std::string> written = stores[r]->written();
    EXPECT_FALSE(written.empty()) << "rank " << r << " wrote nothing";
    for (const std::string& key : written) {
      auto parsed = core::ParseRendezvousKey(key);
      ASSERT_TRUE(parsed.ok()) << key << ": " << parsed.status();
      EXPECT_EQ(parsed->keyspace, "gloo") << key;
      EXPECT_EQ(parsed->owner, job_ranks[r])
          << "group rank " << r << " wrote " << key;
    }
  }
}

}  // namespace
}  // namespace shardd::comm
