#ifndef SHARDD_DAEMON_NODE_EXPORT_RENDEZVOUS_H_
#define SHARDD_DAEMON_NODE_EXPORT_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/comm/store.h"
#include "daemon/core/mono_time.h"

namespace shardd::node {

// Makes every rank agree, before the first gather, whether a FULL export
// goes ahead: a rank that never calls ExportState must fail the export on
// every rank cleanly, not leave its peers in a gather until the collective
// timeout (which reads as a failed peer and costs that healthy rank its
// place in the job).
//
// One decision, made by one rank, that every rank follows (so no two
// ranks can see the deadline differently):
//   1. rank 0 offers an attempt: export/0/offer = "<step>:<attempt>:open"
//      (the attempt a fresh random id);
//   2. every other rank at the same committed step joins it:
//      export/<rank>/join = "<attempt>";
//   3. rank 0 decides, as soon as every rank has joined or when its join
//      window ends: export/0/decision = "<attempt>:go" or
//      "<attempt>:abort:<ranks missing>", then closes the offer;
//   4. every rank returns that decision: OK to gather, or
//      FAILED_PRECONDITION naming the ranks that did not join.
// A rank that finds no open offer for its step within its window never
// joined, so rank 0 cannot decide "go" without it; once a rank has joined
// it waits for the decision (rank 0 makes it within its window, or its
// failure changes the epoch, which ends the wait with ABORTED). The keys
// are replaceable (core::ExportKey), one per role however many exports.
//
// Polls the store (every kPollInterval): the store's Wait says only that a
// key exists, and these keys are rewritten by each export.
//
// Thread-compatible: one Agree at a time per rank. The store is borrowed.
class ExportRendezvous {
 public:
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(5);
  // How much longer than its window a rank that has joined waits for rank
  // 0's decision before it gives up (rank 0 decides within its own window,
  // which starts when it offers; this covers a rank 0 that offered late).
  static constexpr absl::Duration kDecisionGrace = absl::Seconds(30);

  struct Options {
    int rank = 0;
    int world_size = 1;
    // How long rank 0 waits for the others to join, and how long the
    // others wait for rank 0's offer.
    absl::Duration window = absl::Seconds(30);
    // A fresh attempt id (rank 0 only); tests may fix it.
    std::function<uint64_t()> attempt_id;
  };

  ExportRendezvous(comm::Store& store, Options options);

  // Agrees on the export of committed step `step`. OK: every rank joined,
  // gather. FAILED_PRECONDITION naming the ranks that did not join (rank
  // 0's decision), DEADLINE_EXCEEDED (no offer for this step came: rank 0
  // did not export, or is at another step, which the message names), or
  // the store's status (ABORTED when the epoch changed).
  absl::Status Agree(int64_t step);

 private:
  absl::Status Lead(int64_t step);
  absl::Status Follow(int64_t step);

  comm::Store& store_;
  const Options options_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_EXPORT_RENDEZVOUS_H_
