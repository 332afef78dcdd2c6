// rendezvous_attacker: the attack of issue #29 as a process. It never joins;
// it reaches the coordinator's port and, round after round until SIGTERM,
// forges what the ranks exchange in the current epoch (read from the
// public GetClusterState): every rank's model spec, Gloo addresses and
// NCCL unique ids, keys no rank owns, the old (unowned) key shapes; with no
// lease token and with made-up ones; it reads and waits for those keys;
// and it tries to obtain a live member's lease token by repeating that
// member's Join (identity and incarnation are public).
//
//   rendezvous_attacker --coordinator=127.0.0.1:PORT
//
// Machine-readable lines on stdout:
//   round epoch=E attempts=N                 (every 50th round)
//   ACCEPTED <what>                          (an attack that got through)
//   refused <rpc> code=<CODE> count=<n>      (at exit, per RPC and code)
//   epochs E1 E2 ...                         (at exit: the epochs attacked)
//   summary rounds=R attempts=N refused=N accepted=A
// Exit status 0 on SIGTERM, 1 when no round could be made (the coordinator
// never answered).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "", "host:port of the coordinator");
ABSL_FLAG(int64_t, pace_ms, 20,
          "pause between rounds (rate limit, not synchronisation)");

namespace shardd::attacker {
namespace {

namespace pb = ::shardd::v1;

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  return context;
}

class Attacker {
 public:
  explicit Attacker(const std::string& address)
      : stub_(pb::Coordinator::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {}

  // One round against the cluster as it is now; false when the state could
  // not be read.
  bool Round() {
    pb::ClusterState state;
    pb::GetClusterStateRequest request;
    request.set_max_decisions(1);
    if (!stub_->GetClusterState(Context().get(), request, &state).ok()) {
      return false;
    }
    ++rounds_;
    const int64_t e = state.epoch();
    epochs_.insert(e);
    const int w = state.world_size();
    const int f = std::max(1, state.sharding_factor());
    std::vector<std::string> keys = {
        "attacker/probe", "shard/0/0", absl::StrCat("epoch/", e, "/shard/0/0"),
        absl::StrCat("epoch/", e, "/shard/0/rank_0"),
        absl::StrCat("epoch/", e, "/shard.0/nccl_id")};
    for (int r = 0; r < w; ++r) {
      const std::string shard = absl::StrCat("shard/", r / f);
      const std::string replica = absl::StrCat("replica/", r % f);
      keys.push_back(absl::StrCat("model/", r));
      keys.push_back(
          absl::StrCat("gloo/", r, "/epoch/", e, "/", shard, "/", r % f));
      keys.push_back(
          absl::StrCat("gloo/", r, "/epoch/", e, "/", shard, "/rank_", r % f));
      keys.push_back(
          absl::StrCat("gloo/", r, "/epoch/", e, "/", replica, "/", r / f));
      keys.push_back(
          absl::StrCat("nccl/", r, "/epoch/", e, "/shard.", r / f, "/id"));
    }
    // No token, a made-up one, and one shaped like the coordinator's.
    const std::vector<std::string> tokens = {"", "forged",
                                             "0123456789abcdef-1"};
    for (const std::string& token : tokens) {
      for (const std::string& key : keys) {
        pb::RendezvousSetRequest set;
        set.set_epoch(e);
        set.set_key(key);
        set.set_value("evil");
        set.set_lease_token(token);
        set.set_rank(0);
        pb::RendezvousSetResponse set_response;
        Note("RendezvousSet", key,
             stub_->RendezvousSet(Context().get(), set, &set_response));

        pb::RendezvousGetRequest get;
        get.set_epoch(e);
        get.set_key(key);
        get.set_lease_token(token);
        pb::RendezvousGetResponse get_response;
        Note("RendezvousGet", key,
             stub_->RendezvousGet(Context().get(), get, &get_response));
      }
      pb::RendezvousWaitRequest wait;
      wait.set_epoch(e);
      for (int r = 0; r < w; ++r) wait.add_keys(absl::StrCat("model/", r));
      wait.set_lease_token(token);
      pb::RendezvousWaitResponse wait_response;
      Note("RendezvousWait", "model/*",
           stub_->RendezvousWait(Context().get(), wait, &wait_response));
    }
    // Repeat a live member's Join (public identity and incarnation): a
    // token handed out here would open every door above.
    for (const pb::SlotState& slot : state.slots()) {
      // Live slots only: an empty or failed one is free for anyone to
      // claim (Join is not authenticated without TLS), which this attacker
      // does not try; it wants a live member's token.
      const bool live = slot.state() == pb::MEMBER_STATE_JOINING ||
                        slot.state() == pb::MEMBER_STATE_RECOVERING ||
                        slot.state() == pb::MEMBER_STATE_READY;
      if (!live || slot.member().identity().empty()) continue;
      pb::JoinRequest join;
      join.set_rank(slot.rank());
      join.set_identity(slot.member().identity());
      join.set_peer_address(slot.member().peer_address());
      join.set_incarnation(slot.member().incarnation());
      pb::JoinResponse response;
      const grpc::Status s = stub_->Join(Context().get(), join, &response);
      // Refused, or (the slot left meanwhile) no token: either way no
      // member's token may come back.
      Note("Join", slot.member().identity(),
           s.ok() && !response.lease_token().empty()
               ? s
               : grpc::Status(s.ok() ? grpc::StatusCode::PERMISSION_DENIED
                                     : s.error_code(),
                              s.error_message()));
    }
    if (rounds_ % 50 == 1) {
      std::printf("round epoch=%lld attempts=%lld\n", static_cast<long long>(e),
                  static_cast<long long>(attempts_));
      std::fflush(stdout);
    }
    return true;
  }

  void Summary() {
    for (const auto& [what, n] : refused_) {
      std::printf("refused %s count=%lld\n", what.c_str(),
                  static_cast<long long>(n));
    }
    std::printf("epochs");
    for (int64_t e : epochs_) std::printf(" %lld", static_cast<long long>(e));
    std::printf("\n");
    std::printf(
        "summary rounds=%lld attempts=%lld refused=%lld accepted=%lld\n",
        static_cast<long long>(rounds_), static_cast<long long>(attempts_),
        static_cast<long long>(attempts_ - accepted_),
        static_cast<long long>(accepted_));
    std::fflush(stdout);
  }

  int64_t rounds() const { return rounds_; }

 private:
  // An attempt's outcome: any OK is an attack that got through.
  void Note(const std::string& rpc, const std::string& key,
            const grpc::Status& status) {
    ++attempts_;
    if (status.ok()) {
      ++accepted_;
      std::printf("ACCEPTED %s %s\n", rpc.c_str(), key.c_str());
      std::fflush(stdout);
      return;
    }
    ++refused_[absl::StrCat(rpc, " code=", CodeName(status.error_code()))];
  }

  static std::string CodeName(grpc::StatusCode code) {
    switch (code) {
      case grpc::StatusCode::UNAUTHENTICATED:
        return "UNAUTHENTICATED";
      case grpc::StatusCode::PERMISSION_DENIED:
        return "PERMISSION_DENIED";
      case grpc::StatusCode::INVALID_ARGUMENT:
        return "INVALID_ARGUMENT";
      case grpc::StatusCode::ALREADY_EXISTS:
        return "ALREADY_EXISTS";
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return "DEADLINE_EXCEEDED";
      case grpc::StatusCode::UNAVAILABLE:
        return "UNAVAILABLE";
      default:
        return absl::StrCat("CODE_", static_cast<int>(code));
    }
  }

  std::unique_ptr<pb::Coordinator::Stub> stub_;
  int64_t rounds_ = 0;
  int64_t attempts_ = 0;
  int64_t accepted_ = 0;
  std::map<std::string, int64_t> refused_;
  std::set<int64_t> epochs_;
};

int Run() {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    std::fprintf(stderr, "rendezvous_attacker: --coordinator is required\n");
    return 2;
  }
  Attacker attacker(coordinator);
  const absl::Duration pace = absl::Milliseconds(absl::GetFlag(FLAGS_pace_ms));
  while (!g_stop.load()) {
    attacker.Round();
    absl::SleepFor(pace);  // Rate limit of the attack loop.
  }
  attacker.Summary();
  return attacker.rounds() > 0 ? 0 : 1;
}

}  // namespace
}  // namespace shardd::attacker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  struct sigaction action = {};
  action.sa_handler = shardd::attacker::OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return shardd::attacker::Run();
}
