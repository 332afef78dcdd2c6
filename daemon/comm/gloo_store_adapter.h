#ifndef SHARDD_DAEMON_COMM_GLOO_STORE_ADAPTER_H_
#define SHARDD_DAEMON_COMM_GLOO_STORE_ADAPTER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/comm/store.h"
#include "daemon/core/mono_time.h"
#include "gloo/rendezvous/store.h"

namespace shardd::comm {

// Presents our Store to Gloo's rendezvous (Context::connectFullMesh) as a
// gloo::rendezvous::Store.
//
// Every key is prefixed with Prefix(epoch, group), so communicators of
// different epochs and groups never see each other's addresses. As in
// Gloo's own stores, get() waits for the key first. Every wait ends at one
// deadline (the communicator's connect deadline), whatever
// timeout Gloo passes. Gloo's interface reports failure by throwing: a
// failed call throws StatusException carrying our store's status (a timed
// out wait is DEADLINE_EXCEEDED naming the missing key), which the code
// around connectFullMesh catches.
//
// Borrows `store`; used by one thread at a time (Gloo's rendezvous).
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(shardd::comm::Store& store, std::string prefix,
                   MonoTime deadline);

  // "epoch/<epoch>/<group>/".
  static std::string Prefix(int64_t epoch, absl::string_view group);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  shardd::comm::Store& store_;
  const std::string prefix_;
  const MonoTime deadline_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_STORE_ADAPTER_H_
