#include "bench/heartbeat_load.h"

#include <atomic>
#include <memory>
#include <thread>

#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::bench {
namespace {

namespace pb = ::shardd::v1;

struct Call {
  grpc::ClientContext context;
  pb::HeartbeatResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::HeartbeatResponse>>
      reader;
};

// One load thread: keeps `in_flight` heartbeats outstanding until `end`.
void Drive(const HeartbeatLoadOptions& options, int thread,
           const std::vector<pb::HeartbeatRequest>& requests, MonoTime end,
           std::atomic<int64_t>& ok, std::atomic<int64_t>& failed) {
  grpc::ChannelArguments args;
  args.SetInt("shardd.bench.load_channel", thread);
  auto channel = grpc::CreateCustomChannel(
      options.address, grpc::InsecureChannelCredentials(), args);
  auto stub = pb::Coordinator::NewStub(channel);
  grpc::CompletionQueue cq;
  size_t next = static_cast<size_t>(thread);
  int outstanding = 0;
  auto issue = [&] {
    auto* call = new Call;
    rpc::SetDeadline(&call->context, MonoNow() + absl::Seconds(10));
    call->reader = stub->PrepareAsyncHeartbeat(
        &call->context, requests[next % requests.size()], &cq);
    next += static_cast<size_t>(options.threads);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
    ++outstanding;
  };
  for (int i = 0; i < options.in_flight; ++i) issue();
  void* tag = nullptr;
  bool got = false;
  while (outstanding > 0 && cq.Next(&tag, &got)) {
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    --outstanding;
    if (call->status.ok()) {
      ok.fetch_add(1, std::memory_order_relaxed);
    } else {
      failed.fetch_add(1, std::memory_order_relaxed);
    }
    if (MonoNow() < end) issue();
  }
  cq.Shutdown();
  while (cq.Next(&tag, &got)) delete static_cast<Call*>(tag);
}

}  // namespace

HeartbeatLoadResult HeartbeatLoad::Run(const HeartbeatLoadOptions& options,
                                       const std::vector<MemberLease>& leases) {
  std::vector<pb::HeartbeatRequest> requests;
  for (const MemberLease& lease : leases) {
    pb::HeartbeatRequest r;
    r.set_rank(lease.rank);
    r.set_lease_token(lease.lease_token);
    r.set_epoch(lease.epoch);
    r.set_committed_step(lease.committed_step);
    r.set_state(pb::MEMBER_STATE_READY);
    requests.push_back(std::move(r));
  }
  HeartbeatLoadResult result;
  if (requests.empty()) return result;
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> failed{0};
  const MonoTime start = MonoNow();
  const MonoTime end = start + options.duration;
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back(
        [&, t] { Drive(options, t, requests, end, ok, failed); });
  }
  for (std::thread& t : threads) t.join();
  result.seconds = absl::ToDoubleSeconds(MonoNow() - start);
  result.ok = ok.load();
  result.failed = failed.load();
  return result;
}

}  // namespace shardd::bench
