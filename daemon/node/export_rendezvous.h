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
#include "daemon/node/export_record.h"

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
// And every rank ends with rank 0's outcome (Conclude): only rank 0 writes
// the file, and the ranks outside its shard group finish their gathers
// whether or not it does (a peer of rank 0 dying mid-export fails rank 0's
// gathers only). Rank 0 publishes export/0/outcome.<attempt> =
// "<step>:<attempt>:ok" or "<step>:<attempt>:failed:<code>:<message>"; the
// others wait for it (the store's Wait, not polling: rank 0 may write for
// minutes) and return it. The store is the epoch's: when the
// epoch ends first, a rank that did not read the outcome returns ABORTED
// and remembers the attempt (ExportRecord); rank 0 publishes its last
// outcome again in every later epoch (PublishOutcome), so that the rank's
// retry at the same step returns "written" if rank 0 wrote the file then,
// instead of waiting for an offer rank 0 (told OK) never makes. Every rank
// that learned rank 0 wrote the file publishes that too (its own key,
// export/<rank>/learned, until a step is committed), and rank 0 looks
// before it offers: if its daemon died after writing the file and before
// answering, its trainer's retry through the replacement finds the file
// written (Options::written checks the file itself) instead of offering an
// attempt the others, told OK, never join.
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

  // What Agree decided.
  enum class Agreement {
    // Every rank joined: gather.
    kGo,
    // This rank's earlier attempt at this step, whose outcome it did not
    // learn, was concluded by rank 0 with the file written; or (rank 0) a
    // rank learned that an attempt at this step wrote the file, and it is
    // there: nothing to do.
    kWrittenBefore,
  };

  struct Options {
    int rank = 0;
    int world_size = 1;
    // How long rank 0 waits for the others to join, and how long the
    // others wait for rank 0's offer.
    absl::Duration window = absl::Seconds(30);
    // A fresh attempt id (rank 0 only); tests may fix it.
    std::function<uint64_t()> attempt_id;
    // This daemon's memory of earlier exports; not owned, never null, must
    // outlive the rendezvous.
    ExportRecord* record = nullptr;
    // Rank 0: whether the file this export would write already holds a
    // FULL export of `step` (FileHoldsFullExport of the request).
    // Null: never (every export is offered).
    std::function<bool(int64_t step)> written = nullptr;
  };

  ExportRendezvous(comm::Store& store, Options options);

  // Agrees on the export of committed step `step` (see Agreement).
  // FAILED_PRECONDITION naming the ranks that did not join (rank 0's
  // decision), DEADLINE_EXCEEDED (no offer for this step came: rank 0 did
  // not export, or is at another step, which the message names), or the
  // store's status (ABORTED when the epoch changed).
  absl::StatusOr<Agreement> Agree(int64_t step);

  // After this rank's part of the agreed export ended with `mine`: rank 0
  // publishes it and returns it; another rank returns its own failure, or
  // waits (until `deadline`) for rank 0's outcome and returns it: OK when
  // the file was written, rank 0's code otherwise ("rank 0 did not write
  // the file: ..."), ABORTED when the epoch ended first, DEADLINE_EXCEEDED
  // at the deadline (both remembered in the record, see the class comment).
  absl::Status Conclude(int64_t step, const absl::Status& mine,
                        MonoTime deadline);

  // What `record` knows published in `store` (a new epoch's) by `rank`:
  // rank 0's last outcome, for a rank that retries an export whose outcome
  // it did not learn; the learned outcome of an attempt that wrote the
  // file, for rank 0's retry. A failure is left to the next epoch.
  static void PublishOutcome(comm::Store& store, const ExportRecord& record,
                             int rank);

 private:
  absl::StatusOr<Agreement> Lead(int64_t step);
  // Rank 0, before it offers: the attempt at `step` that some rank learned
  // wrote the file, when the file is there (Options::written); "" if none.
  absl::StatusOr<std::string> WrittenBefore(int64_t step);
  absl::StatusOr<Agreement> Follow(int64_t step);
  // A follower's wait for rank 0's outcome of attempt_.
  absl::Status AwaitOutcome(int64_t step, MonoTime deadline);

  comm::Store& store_;
  const Options options_;
  // The attempt this rank offered (rank 0) or joined; set by Agree.
  std::string attempt_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_EXPORT_RENDEZVOUS_H_
