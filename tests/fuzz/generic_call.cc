#include "tests/fuzz/generic_call.h"

#include <chrono>

#include "absl/time/clock.h"
#include "grpcpp/generic/generic_stub.h"

namespace shardd::tests {
namespace {

// Waits for the completion of the one operation in flight; false when it
// failed, or did not complete by `hard_deadline` (then *hung is set).
bool Await(grpc::CompletionQueue* cq, absl::Time hard_deadline, bool* hung) {
  void* tag = nullptr;
  bool ok = false;
  const grpc::CompletionQueue::NextStatus next =
      cq->AsyncNext(&tag, &ok, absl::ToChronoTime(hard_deadline));
  if (next == grpc::CompletionQueue::TIMEOUT) {
    *hung = true;
    return false;
  }
  return next == grpc::CompletionQueue::GOT_EVENT && ok;
}

}  // namespace

GenericCallResult CallGeneric(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& method,
                              const std::string& request,
                              absl::Duration timeout, int cancel_after) {
  GenericCallResult result;
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const absl::Time hard_deadline = absl::Now() + timeout + absl::Seconds(5);
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &cq);
  bool hung = false;
  call->StartCall(reinterpret_cast<void*>(1));
  bool ok = Await(&cq, hard_deadline, &hung);
  if (ok) {
    grpc::Slice slice(request);
    grpc::ByteBuffer buffer(&slice, 1);
    call->WriteLast(buffer, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    ok = Await(&cq, hard_deadline, &hung);
  }
  while (ok && !hung) {
    grpc::ByteBuffer response;
    call->Read(&response, reinterpret_cast<void*>(3));
    if (!Await(&cq, hard_deadline, &hung)) break;
    if (++result.responses == cancel_after) {
      context.TryCancel();
      break;
    }
  }
  if (hung) context.TryCancel();
  call->Finish(&result.status, reinterpret_cast<void*>(4));
  // Finish completes by the deadline (at once after a cancel); bounded
  // all the same, so that a gRPC bug cannot hang the test.
  bool finish_hung = false;
  Await(&cq, absl::Now() + absl::Seconds(10), &finish_hung);
  result.hung = hung || finish_hung;
  cq.Shutdown();
  void* tag = nullptr;
  bool ignored = false;
  while (cq.Next(&tag, &ignored)) {
  }
  return result;
}

}  // namespace shardd::tests
