#include "daemon/node/peer_probe_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"

namespace shardd::node {
namespace {

// How long past its deadline a probe's callback may take to arrive (gRPC
// runs it right after the deadline fires) before the round cancels the
// call and, if even that does not bring it, reports the probe as failed.
constexpr absl::Duration kCallbackGrace = absl::Seconds(2);

// One probe of a round. Held by the round, which the callbacks share, so
// that a callback arriving after ProbeAll gave up writes into live memory.
struct Call {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Peer::Stub> stub;
  grpc::ClientContext context;
  v1::ProbeRequest request;
  v1::ProbeResponse response;
  grpc::Status status;
  bool done = false;
};

struct Round {
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::unique_ptr<Call>> calls;
};

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

std::vector<absl::Status> PeerProbePool::ProbeAll(
    const std::vector<std::string>& addresses, absl::Time deadline) {
  auto round = std::make_shared<Round>();
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
      round->calls.push_back(std::move(call));
    }
  }
  {
    absl::MutexLock lock(&round->mu);
    round->pending = static_cast<int>(round->calls.size());
  }
  for (const std::unique_ptr<Call>& owned : round->calls) {
    Call* call = owned.get();
    call->stub = v1::Peer::NewStub(call->channel);
    call->context.set_deadline(absl::ToChronoTime(deadline));
    call->request.set_from_rank(-1);
    call->stub->async()->Probe(&call->context, &call->request, &call->response,
                               [round, call](grpc::Status status) {
                                 absl::MutexLock lock(&round->mu);
                                 call->status = std::move(status);
                                 call->done = true;
                                 --round->pending;
                               });
  }
  const auto all_done = [&round]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(round->mu) {
    return round->pending == 0;
  };
  {
    absl::MutexLock lock(&round->mu);
    if (!round->mu.AwaitWithDeadline(absl::Condition(&all_done),
                                     deadline + kCallbackGrace)) {
      // Never seen: every call has its deadline. Cancelling brings the
      // callback at once; the calls stay alive in `round` regardless.
      for (const std::unique_ptr<Call>& call : round->calls) {
        if (!call->done) call->context.TryCancel();
      }
      round->mu.AwaitWithDeadline(absl::Condition(&all_done),
                                  absl::Now() + kCallbackGrace);
    }
  }
  std::vector<absl::Status> results;
  results.reserve(round->calls.size());
  absl::MutexLock pool_lock(&mu_);
  absl::MutexLock lock(&round->mu);
  for (const std::unique_ptr<Call>& call : round->calls) {
    absl::Status status =
        call->done ? rpc::FromGrpc(call->status)
                   : absl::DeadlineExceededError("no answer by the deadline");
    if (!status.ok()) {
      status = absl::Status(
          status.code(),
          absl::StrCat("peer ", call->address, ": ", status.message()));
      // A fresh connection for its next probe, unless another round has
      // replaced the channel already.
      if (auto it = channels_.find(call->address);
          it != channels_.end() && it->second == call->channel) {
        channels_.erase(it);
      }
    }
    results.push_back(std::move(status));
  }
  return results;
}

int PeerProbePool::channels() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(channels_.size());
}

}  // namespace shardd::node
