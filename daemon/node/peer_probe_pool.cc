#include "daemon/node/peer_probe_pool.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"

namespace shardd::node {
namespace {

// How long past its deadline a probe's callback may take to arrive (gRPC
// runs it right after the deadline fires) before the round cancels the
// call and, if even that does not bring it, reports the probe as failed.
constexpr absl::Duration kCallbackGrace = absl::Seconds(2);

// What the callbacks write: statuses and the count still due. Shared
// with them, and free of gRPC objects, so that whichever thread drops the
// last reference destroys nothing of gRPC's.
struct Outcomes {
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  std::vector<grpc::Status> status ABSL_GUARDED_BY(mu);
  std::vector<bool> done ABSL_GUARDED_BY(mu);
};

// One probe's gRPC objects. Owned by ProbeAll's thread and destroyed there
// once its callback has run: destroying a context, stub or channel on one
// of gRPC's callback threads (where the last shared reference to them
// could otherwise drop) is not allowed (a daemon hit gRPC's
// "assertion failed: prior > 0" that way).
struct Call {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Peer::Stub> stub;
  grpc::ClientContext context;
  v1::ProbeRequest request;
  v1::ProbeResponse response;
};

std::shared_ptr<Outcomes> NewOutcomes(size_t n) {
  auto outcomes = std::make_shared<Outcomes>();
  absl::MutexLock lock(&outcomes->mu);
  outcomes->pending = static_cast<int>(n);
  outcomes->status.resize(n);
  outcomes->done.assign(n, false);
  return outcomes;
}

// Calls Peer.Probe on every call's channel at once; each callback records
// its status in `outcomes` (which it shares, so that it may run after the
// round gave up on it).
void StartProbes(const std::vector<std::unique_ptr<Call>>& calls,
                 const std::shared_ptr<Outcomes>& outcomes, MonoTime deadline) {
  for (size_t i = 0; i < calls.size(); ++i) {
    Call* call = calls[i].get();
    call->stub = v1::Peer::NewStub(call->channel);
    rpc::SetDeadline(&call->context, deadline);
    call->request.set_from_rank(-1);
    // The callback may run on this thread, before Probe returns.
    call->stub->async()->Probe(&call->context, &call->request, &call->response,
                               [outcomes, i](grpc::Status status) {
                                 absl::MutexLock lock(&outcomes->mu);
                                 outcomes->status[i] = std::move(status);
                                 outcomes->done[i] = true;
                                 --outcomes->pending;
                               });
  }
}

// Waits for every callback and copies out what they wrote: each call's
// status and whether its callback came.
void AwaitProbes(Outcomes& outcomes,
                 const std::vector<std::unique_ptr<Call>>& calls,
                 MonoTime deadline, std::vector<grpc::Status>* statuses,
                 std::vector<bool>* done) {
  const auto all_done = [&outcomes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                            outcomes.mu) { return outcomes.pending == 0; };
  absl::MutexLock lock(&outcomes.mu);
  if (!AwaitUntil(&outcomes.mu, absl::Condition(&all_done),
                  deadline + kCallbackGrace)) {
    // Never seen: every call has its deadline. Cancelling brings the
    // callback at once.
    for (size_t i = 0; i < calls.size(); ++i) {
      if (!outcomes.done[i]) calls[i]->context.TryCancel();
    }
    AwaitUntil(&outcomes.mu, absl::Condition(&all_done),
               MonoNow() + kCallbackGrace);
  }
  *statuses = outcomes.status;
  *done = outcomes.done;
}

}  // namespace

PeerProbePool::PeerProbePool(
    std::shared_ptr<grpc::ChannelCredentials> credentials)
    : credentials_(credentials != nullptr
                       ? std::move(credentials)
                       : grpc::InsecureChannelCredentials()) {}

std::shared_ptr<grpc::Channel> PeerProbePool::ChannelFor(
    const std::string& address) {
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    // Its own connection: gRPC shares subchannels (connections) between
    // channels to the same target by default, and a channel made to
    // replace a failed one must connect afresh (see the class comment).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel = grpc::CreateCustomChannel(address, credentials_, args);
  }
  return channel;
}

absl::Status PeerProbePool::ProbeResult(bool answered,
                                        const absl::Status& status,
                                        const std::string& address) {
  const absl::Status result =
      answered ? status
               : absl::DeadlineExceededError("no answer by the deadline");
  if (result.ok()) return result;
  return absl::Status(result.code(),
                      absl::StrCat("peer ", address, ": ", result.message()));
}

std::vector<absl::Status> PeerProbePool::ProbeAll(
    const std::vector<std::string>& addresses, MonoTime deadline) {
  const size_t n = addresses.size();
  auto outcomes = NewOutcomes(n);
  std::vector<std::unique_ptr<Call>> calls;
  calls.reserve(n);
  {
    absl::MutexLock lock(&mu_);
    // Keep only the channels of this round's addresses.
    std::map<std::string, std::shared_ptr<grpc::Channel>> kept;
    for (const std::string& address : addresses) {
      if (auto it = channels_.find(address); it != channels_.end()) {
        kept.insert(*it);
      }
    }
    channels_ = std::move(kept);
    for (const std::string& address : addresses) {
      auto call = std::make_unique<Call>();
      call->address = address;
      call->channel = ChannelFor(address);
      calls.push_back(std::move(call));
    }
  }
  StartProbes(calls, outcomes, deadline);
  std::vector<grpc::Status> statuses;
  std::vector<bool> done;
  AwaitProbes(*outcomes, calls, deadline, &statuses, &done);
  std::vector<absl::Status> results;
  results.reserve(n);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < n; ++i) {
    Call* call = calls[i].get();
    absl::Status status =
        ProbeResult(done[i], rpc::FromGrpc(statuses[i]), call->address);
    // A fresh connection for its next probe, unless another round has
    // replaced the channel already.
    if (!status.ok()) ForgetChannel(call->address, call->channel);
    results.push_back(std::move(status));
    // A call whose callback never came must outlive this round: gRPC may
    // still write into it. Never seen (see AwaitProbes); leaked, not freed.
    if (!done[i]) calls[i].release();
  }
  return results;
}

void PeerProbePool::ForgetChannel(
    const std::string& address, const std::shared_ptr<grpc::Channel>& channel) {
  if (auto it = channels_.find(address);
      it != channels_.end() && it->second == channel) {
    channels_.erase(it);
  }
}

int PeerProbePool::channels() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(channels_.size());
}

}  // namespace shardd::node
