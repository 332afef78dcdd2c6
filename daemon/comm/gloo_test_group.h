#ifndef SHARDD_DAEMON_COMM_GLOO_TEST_GROUP_H_
#define SHARDD_DAEMON_COMM_GLOO_TEST_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/gloo_collective.h"
#include "gtest/gtest.h"

namespace shardd::comm::testing {

// For the tests of the Gloo communicator: a group of ranks as threads of
// one process, connected over Gloo TCP on 127.0.0.1 through an
// InMemoryStore.
using Comms = std::vector<std::unique_ptr<Collective>>;

// Runs fn(rank) on one thread per rank and joins them.
void ForEachRank(int world, const std::function<void(int)>& fn);

// Options of rank `rank` of `world`: epoch 1, group "world", 30 s to
// connect and per operation.
GlooCollectiveOptions GroupOptions(int rank, int world);

// Connects `world` ranks; fails the calling test (gtest) when one cannot.
Comms ConnectGroup(int world, absl::Duration op_timeout = absl::Seconds(30));

// How a rank leaves its group while the others run an operation: its
// communicator destroyed, aborted, or alive and connected but silent.
enum class Departure { kDestroyed, kAborted, kSilent };

// Makes `comm` leave as `departure` says.
void Leave(Departure departure, std::unique_ptr<Collective>& comm);

// Every departure, and its name for parameterized tests.
std::vector<Departure> AllDepartures();
std::string DepartureName(const ::testing::TestParamInfo<Departure>& info);

}  // namespace shardd::comm::testing

#endif  // SHARDD_DAEMON_COMM_GLOO_TEST_GROUP_H_
