#ifndef SHARDD_DAEMON_COMM_GLOO_STORE_ADAPTER_H_
#define SHARDD_DAEMON_COMM_GLOO_STORE_ADAPTER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/comm/store.h"
#include "daemon/core/mono_time.h"
#include "gloo/rendezvous/store.h"

namespace shardd::comm {

// Presents our Store to Gloo's rendezvous (Context::connectFullMesh) as a
// gloo::rendezvous::Store.
//
// Every key Gloo names is stored under the rendezvous key grammar
// (core/rendezvous_key.h) as "gloo/<owner>/epoch/<epoch>/<group>/<key>",
// where the owner is the job rank of the group rank that writes the key:
// the coordinator lets each member write its own keys only, and
// communicators of different epochs and groups never see each other's
// addresses. As in Gloo's own stores, get() waits for the key first. Every
// wait ends at one deadline (the communicator's connect deadline), whatever
// timeout Gloo passes. Gloo's interface reports failure by throwing: a
// failed call throws StatusException carrying our store's status (a timed
// out wait is DEADLINE_EXCEEDED naming the missing key), which the code
// around connectFullMesh catches.
//
// Borrows `store`; used by one thread at a time (Gloo's rendezvous).
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // `job_ranks[r]` is the job rank of group rank r; empty: group ranks are
  // job ranks.
  GlooStoreAdapter(shardd::comm::Store& store, int64_t epoch, std::string group,
                   std::vector<int> job_ranks, MonoTime deadline);

  // The group rank that writes Gloo's `key`. Gloo names every key it writes
  // after its writer: "<rank>" (its pair addresses) and "rank_<rank>" (its
  // host name) in the Gloo we build with, "<rank>/<peer>" in older ones.
  // INTERNAL for a key that starts with no rank (a Gloo that writes keys
  // this adapter does not know).
  static absl::StatusOr<int> GlooKeyWriter(absl::string_view key);

  // The store key of Gloo's `key` (see the class comment). INTERNAL when
  // its writer is not a rank of the group.
  absl::StatusOr<std::string> StoreKey(absl::string_view key) const;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // StoreKey, throwing StatusException on error.
  std::string StoreKeyOrThrow(absl::string_view key) const;

  shardd::comm::Store& store_;
  const int64_t epoch_;
  const std::string group_;
  const std::vector<int> job_ranks_;
  const MonoTime deadline_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_STORE_ADAPTER_H_
