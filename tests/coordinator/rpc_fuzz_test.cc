// Hostile requests to every RPC of a real coordinator process: for each
// method of shardd.v1.Coordinator (found through its descriptor, so a new
// RPC is fuzzed without touching this test), a fresh coordinator with two
// members joined by the test gets a few hundred requests built from the
// request type's descriptor (HostileMessageFactory: edge values, huge
// strings and repeated fields, out-of-range enums, real lease tokens and
// keys from a dictionary, and now and then bytes that are no message at
// all); half of them are a valid request with a few fields spoilt, so that
// they reach deep into the handler. Four threads at once. Every call must end
// with a status within its deadline; a well-formed request never gets INTERNAL
// or UNKNOWN; the process stays up and still answers GetClusterState.
// Deterministic seeds; a few seconds in all.
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/process_cluster.h"
#include "tests/coordinator/test_main.h"
#include "tests/fuzz/generic_call.h"
#include "tests/fuzz/hostile_message.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;
using google::protobuf::MethodDescriptor;
using google::protobuf::ServiceDescriptor;

constexpr int kWorld = 4;
constexpr int kThreads = 4;
constexpr int kRequestsPerThread = 60;
constexpr absl::Duration kCallTimeout = absl::Milliseconds(250);

const ServiceDescriptor* CoordinatorService() {
  // The generated file registers the service with the pool.
  return pb::JoinRequest::descriptor()->file()->FindServiceByName(
      "Coordinator");
}

// The codes one method answered, and how often.
struct Tally {
  absl::Mutex mu;
  std::map<grpc::StatusCode, int> codes ABSL_GUARDED_BY(mu);
  std::vector<std::string> problems ABSL_GUARDED_BY(mu);

  void Add(grpc::StatusCode code) {
    absl::MutexLock lock(&mu);
    ++codes[code];
  }
  void Problem(std::string what) {
    absl::MutexLock lock(&mu);
    problems.push_back(std::move(what));
  }
};

// A request of `type` that passes the coordinator's checks, made from the
// members' tokens: half the hostile requests are mutations of it, so that
// they get deep into the handlers. Null for a type without one.
std::unique_ptr<google::protobuf::Message> Seed(
    const google::protobuf::Descriptor* type,
    const std::vector<std::string>& tokens, int64_t epoch) {
  const std::string name(type->name());
  if (name == "JoinRequest") {
    auto m = std::make_unique<pb::JoinRequest>();
    m->set_rank(2);
    m->set_identity("fuzz-2");
    m->set_peer_address("127.0.0.1:3");
    m->set_incarnation("inc-2");
    m->set_join_secret("secret-2");
    return m;
  }
  if (name == "HeartbeatRequest") {
    auto m = std::make_unique<pb::HeartbeatRequest>();
    m->set_rank(0);
    m->set_lease_token(tokens[0]);
    m->set_epoch(epoch);
    m->set_state(pb::MEMBER_STATE_READY);
    return m;
  }
  if (name == "LeaveRequest") {
    auto m = std::make_unique<pb::LeaveRequest>();
    m->set_rank(1);
    m->set_lease_token(tokens[1]);
    m->set_reason("fuzz");
    return m;
  }
  if (name == "ReportFailureRequest") {
    auto m = std::make_unique<pb::ReportFailureRequest>();
    m->set_reporter_rank(0);
    m->set_lease_token(tokens[0]);
    m->set_epoch(epoch);
    m->set_suspect_rank(1);
    m->set_kind(pb::FAILURE_KIND_COLLECTIVE_FAILED);
    return m;
  }
  if (name == "ShouldCommitRequest") {
    auto m = std::make_unique<pb::ShouldCommitRequest>();
    m->set_rank(0);
    m->set_lease_token(tokens[0]);
    m->set_epoch(epoch);
    m->set_step(1);
    m->set_vote(true);
    return m;
  }
  if (name == "RendezvousSetRequest") {
    auto m = std::make_unique<pb::RendezvousSetRequest>();
    m->set_epoch(epoch);
    m->set_key("model/0");
    m->set_value("spec");
    m->set_lease_token(tokens[0]);
    return m;
  }
  if (name == "RendezvousGetRequest") {
    auto m = std::make_unique<pb::RendezvousGetRequest>();
    m->set_epoch(epoch);
    m->set_key("model/1");
    m->set_lease_token(tokens[0]);
    return m;
  }
  if (name == "RendezvousWaitRequest") {
    auto m = std::make_unique<pb::RendezvousWaitRequest>();
    m->set_epoch(epoch);
    m->add_keys("model/0");
    m->add_keys("model/1");
    m->set_lease_token(tokens[1]);
    return m;
  }
  if (name == "WatchMembershipRequest") {
    auto m = std::make_unique<pb::WatchMembershipRequest>();
    m->set_rank(0);
    return m;
  }
  if (name == "GetClusterStateRequest") {
    auto m = std::make_unique<pb::GetClusterStateRequest>();
    m->set_max_decisions(5);
    return m;
  }
  return nullptr;
}

class RpcFuzzTest : public ::testing::TestWithParam<int> {};

TEST_P(RpcFuzzTest, EveryCallEndsWithAStatusAndTheCoordinatorSurvives) {
  const MethodDescriptor* method = CoordinatorService()->method(GetParam());
  ProcessCluster cluster({TestBinaries().coordinator, TestBinaries().member,
                          kWorld, 2, /*lease_ms=*/60000,
                          /*heartbeat_interval_ms=*/20000});
  ASSERT_TRUE(cluster.StartCoordinator().ok());

  // Two members (the test itself), so that real tokens, ranks and the
  // current epoch give the requests a way past the first checks.
  HostileDictionary dictionary;
  std::vector<std::string> tokens;
  int64_t epoch = 0;
  for (int r = 0; r < 2; ++r) {
    pb::JoinRequest join;
    join.set_rank(r);
    join.set_identity(absl::StrCat("fuzz-", r));
    join.set_peer_address(absl::StrCat("127.0.0.1:", r + 1));
    join.set_incarnation(absl::StrCat("inc-", r));
    join.set_join_secret(absl::StrCat("secret-", r));
    pb::JoinResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    ASSERT_TRUE(cluster.stub().Join(&context, join, &response).ok());
    epoch = response.epoch();
    tokens.push_back(response.lease_token());
    for (int copies = 0; copies < 3; ++copies) {  // Weighted: tokens matter.
      dictionary.strings.push_back(response.lease_token());
    }
    for (const std::string& s :
         {join.identity(), join.peer_address(), join.incarnation(),
          join.join_secret(), absl::StrCat("model/", r),
          absl::StrCat("gloo/", r, "/epoch/", epoch, "/world/", r),
          absl::StrCat("nccl/", r, "/epoch/", epoch, "/world/id")}) {
      dictionary.strings.push_back(s);
    }
  }
  dictionary.integers = {epoch, 0, 1, 2, kWorld - 1, kWorld};

  const std::unique_ptr<google::protobuf::Message> seed =
      Seed(method->input_type(), tokens, epoch);
  EXPECT_NE(seed, nullptr) << "no seed request for " << method->name()
                           << ": add one to Seed()";
  const std::string path =
      absl::StrCat("/", CoordinatorService()->full_name(), "/", method->name());
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      cluster.address(), grpc::InsecureChannelCredentials());
  Tally tally;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HostileMessageFactory factory(
          /*seed=*/1000 * (GetParam() + 1) + t, dictionary);
      for (int i = 0; i < kRequestsPerThread; ++i) {
        std::string bytes = (seed != nullptr && factory.Below(2) == 0
                                 ? factory.Mutate(*seed)
                                 : factory.Make(method->input_type()))
                                ->SerializeAsString();
        const bool mangled = factory.Below(8) == 0;
        if (mangled) bytes = factory.Mangle(std::move(bytes));
        // Streams (WatchMembership) are cancelled after their first
        // message: the keepalive would only come at the deadline.
        const GenericCallResult result =
            CallGeneric(channel, path, bytes, kCallTimeout,
                        /*cancel_after=*/method->server_streaming() ? 1 : 0);
        const grpc::StatusCode code = result.status.error_code();
        tally.Add(code);
        if (result.hung) {
          tally.Problem(absl::StrCat("request ", t, ".", i, " hung"));
        } else if (code == grpc::StatusCode::UNKNOWN ||
                   (code == grpc::StatusCode::INTERNAL && !mangled)) {
          tally.Problem(absl::StrCat("request ", t, ".", i, ": code ", code,
                                     ": ", result.status.error_message()));
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  absl::MutexLock lock(&tally.mu);
  std::string summary;
  for (const auto& [code, n] : tally.codes) {
    absl::StrAppend(&summary, " ", code, ":", n);
  }
  std::printf("%s: codes%s\n", path.c_str(), summary.c_str());
  EXPECT_TRUE(tally.problems.empty())
      << tally.problems.size()
      << " problem(s), first: " << tally.problems.front();
  EXPECT_TRUE(cluster.coordinator().Running())
      << "the coordinator died under " << path;
  auto state = cluster.State();
  EXPECT_TRUE(state.ok()) << path << ": " << state.status();
  if (method->name().rfind("Rendezvous", 0) == 0) {
    // Real tokens got some requests past authentication.
    int past = 0;
    for (const auto& [code, n] : tally.codes) {
      if (code != grpc::StatusCode::UNAUTHENTICATED &&
          code != grpc::StatusCode::INTERNAL) {
        past += n;
      }
    }
    EXPECT_GT(past, 0) << path << ": every request was refused at the door";
  }
}

std::string MethodName(const ::testing::TestParamInfo<int>& info) {
  return CoordinatorService()->method(info.param)->name();
}

INSTANTIATE_TEST_SUITE_P(EveryCoordinatorMethod, RpcFuzzTest,
                         ::testing::Range(0,
                                          CoordinatorService()->method_count()),
                         MethodName);

TEST(RpcFuzzCoverageTest, TheFuzzCoversEveryMethodOfTheService) {
  // The methods come from the descriptor; this pins the count so that the
  // list above cannot silently come out empty.
  EXPECT_GE(CoordinatorService()->method_count(), 10);
}

}  // namespace
}  // namespace shardd::tests
