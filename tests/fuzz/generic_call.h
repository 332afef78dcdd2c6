#ifndef SHARDD_TESTS_FUZZ_GENERIC_CALL_H_
#define SHARDD_TESTS_FUZZ_GENERIC_CALL_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace shardd::tests {

struct GenericCallResult {
  grpc::Status status;
  // Response messages received (a unary call: 0 or 1).
  int responses = 0;
  // The call did not finish within its deadline plus a grace: the server
  // (or gRPC) hung. status is then CANCELLED by the client.
  bool hung = false;
};

// Calls `method` ("/package.Service/Method") on `channel` with the raw
// request bytes, whatever the method's kind (unary or server-streaming: one
// request, then every response until the server ends the call), with a
// deadline of `timeout`. With `cancel_after` > 0 the client cancels the
// call after that many responses (a stream that would only end at its
// deadline); 0: never. Never blocks past timeout + 5 s (then `hung`).
GenericCallResult CallGeneric(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& method,
                              const std::string& request,
                              absl::Duration timeout, int cancel_after = 0);

}  // namespace shardd::tests

#endif  // SHARDD_TESTS_FUZZ_GENERIC_CALL_H_
