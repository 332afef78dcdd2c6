#ifndef SHARDD_DAEMON_CORE_RENDEZVOUS_KEY_H_
#define SHARDD_DAEMON_CORE_RENDEZVOUS_KEY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// The grammar of the coordinator's rendezvous keys: every key names the
// rank that owns it, so that the coordinator can let each member write its
// own keys only (Coordinator.RendezvousSet) and refuse every other write.
//
//   key       = namespace "/" owner [ "/" rest ]
//   namespace = "model" | "gloo" | "nccl" | "shm" | "export"
//   owner     = the owner's job rank: decimal, no sign, no leading zero
//   rest      = segment *( "/" segment ), segment = 1*[A-Za-z0-9_.-]
//
// The namespaces and who writes what:
//   model/<rank>                            the registered model (ModelSpec)
//                                           each rank publishes and compares
//                                           (NodeManager's model exchange);
//                                           no rest. Its owner may replace
//                                           it within the epoch (a model
//                                           registered again after a failed
//                                           exchange).
//   gloo/<rank>/epoch/<E>/<group>/<gloo>    what Gloo's connectFullMesh
//                                           writes (its own pair addresses,
//                                           "<group rank>", and host name,
//                                           "rank_<group rank>"), owned by
//                                           the writer's job rank; a rest is
//                                           required.
//   nccl/<rank>/epoch/<E>/<group>/id        the ncclUniqueId of a group,
//                                           written by the group's rank 0,
//                                           whose job rank owns it; a rest
//                                           is required.
//   shm/<rank>/epoch/<E>/<group>/<what>     a shared-memory communicator's
//                                           formation (comm::
//                                           CreateHostCollective): each
//                                           rank's "host" identity and pid
//                                           and "mapped" outcome, rank 0's
//                                           "segment" name; a rest is
//                                           required.
//   export/<rank>/<name>                    a FULL export's join protocol
//                                           (node::ExportRendezvous: rank
//                                           0's "offer" and "decision", each
//                                           rank's "join"); a rest is
//                                           required, and its owner may
//                                           replace it (one key per role
//                                           however many exports).
// Gloo, NCCL and shm keys are write-once per epoch: peers connect to what they
// read, so a value must not change under them.
//
// A key is at most kMaxRendezvousKeyBytes long. Pure functions, no I/O.
namespace shardd::core {

inline constexpr size_t kMaxRendezvousKeyBytes = 1024;

inline constexpr char kModelKeyspace[] = "model";
inline constexpr char kGlooKeyspace[] = "gloo";
inline constexpr char kNcclKeyspace[] = "nccl";
inline constexpr char kShmKeyspace[] = "shm";
inline constexpr char kExportKeyspace[] = "export";

// A key taken apart.
struct RendezvousKey {
  std::string keyspace;  // "model", "gloo", "nccl", "shm" or "export".
  int owner = 0;         // The job rank that may write it.
  std::string rest;      // After "<keyspace>/<owner>/"; empty for model.
  // The owner may replace the value within the epoch (model and export
  // keys); else the key is write-once per epoch.
  bool replaceable = false;
};

// The key's keyspace, owner and rest; INVALID_ARGUMENT naming what is wrong
// (empty or too long, a character or an empty segment outside the grammar,
// an unknown keyspace, an owner that is not a canonical non-negative rank,
// a rest where none belongs or none where one must be).
absl::StatusOr<RendezvousKey> ParseRendezvousKey(absl::string_view key);

// The owner of a key (ParseRendezvousKey(key)->owner).
absl::StatusOr<int> RendezvousKeyOwner(absl::string_view key);

// "model/<rank>".
std::string ModelKey(int rank);

// "export/<rank>/<name>".
std::string ExportKey(int rank, absl::string_view name);

// "gloo/<owner>/epoch/<epoch>/<group>/": followed by Gloo's own key.
std::string GlooKeyPrefix(int owner, int64_t epoch, absl::string_view group);

// "nccl/<owner>/epoch/<epoch>/<group>/id".
std::string NcclIdKey(int owner, int64_t epoch, absl::string_view group);

// "shm/<owner>/epoch/<epoch>/<group>/<what>".
std::string ShmKey(int owner, int64_t epoch, absl::string_view group,
                   absl::string_view what);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_RENDEZVOUS_KEY_H_
