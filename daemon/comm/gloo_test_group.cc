#include "daemon/comm/gloo_test_group.h"

#include <thread>
#include <utility>

#include "daemon/comm/in_memory_store.h"
#include "gtest/gtest.h"

namespace shardd::comm::testing {

void ForEachRank(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

GlooCollectiveOptions GroupOptions(int rank, int world) {
  GlooCollectiveOptions options;
  options.rank = rank;
  options.size = world;
  options.epoch = 1;
  options.group = "world";
  options.connect_timeout = absl::Seconds(30);
  options.default_op_timeout = absl::Seconds(30);
  return options;
}

Comms ConnectGroup(int world, absl::Duration op_timeout) {
  InMemoryStore store;
  Comms comms(world);
  ForEachRank(world, [&](int r) {
    GlooCollectiveOptions options = GroupOptions(r, world);
    options.default_op_timeout = op_timeout;
    auto comm = CreateGlooCollective(options, store);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comms[r] = std::move(*comm);
  });
  for (const auto& comm : comms) EXPECT_NE(comm, nullptr);
  return comms;
}

void Leave(Departure departure, std::unique_ptr<Collective>& comm) {
  switch (departure) {
    case Departure::kDestroyed:
      comm.reset();
      break;
    case Departure::kAborted:
      comm->Abort("leaving");
      break;
    case Departure::kSilent:
      break;  // Alive and connected; never issues the operation.
  }
}

std::vector<Departure> AllDepartures() {
  return {Departure::kDestroyed, Departure::kAborted, Departure::kSilent};
}

std::string DepartureName(const ::testing::TestParamInfo<Departure>& info) {
  static const char* const kNames[] = {"Destroyed", "Aborted", "Silent"};
  return kNames[static_cast<int>(info.param)];
}

}  // namespace shardd::comm::testing
