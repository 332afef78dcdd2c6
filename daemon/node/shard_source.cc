#include "daemon/node/shard_source.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {
namespace {

// The Sends of an out-of-band copy's pieces, all queued at once, and how
// far the stream got with them: the pieces whose chunk (CRC) was written,
// and those whose Send was waited for.
struct PieceSends {
  std::vector<std::shared_ptr<comm::Work>> works;
  size_t described = 0;
  size_t sent = 0;

  // Waits, in order, for the Sends of the first n pieces.
  absl::Status WaitFirst(size_t n) {
    for (; sent < n; ++sent) {
      if (absl::Status s = works[sent]->Wait(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
};

// Queues a Send to `peer` on `replica` for every piece the writer has.
std::vector<std::shared_ptr<comm::Work>> QueueSends(
    comm::Collective& replica, const recovery::ShardStreamWriter& writer,
    int peer, MonoTime deadline) {
  comm::OpOptions op;
  op.timeout = std::max(deadline - MonoNow(), absl::Milliseconds(1));
  std::vector<std::shared_ptr<comm::Work>> sends;
  for (const recovery::PayloadPiece& piece : writer.PendingPieces()) {
    sends.push_back(
        replica.Send(piece.data, piece.length, peer, kShardTransferTag, op));
  }
  return sends;
}

// After the last message: the shard's memory was read whole, every queued
// piece was described by a chunk, and every Send completed.
absl::Status FinishStream(const recovery::ShardStreamWriter& writer,
                          PieceSends& sends) {
  // Reading the shard's memory (a GPU's, through the engine's math) failed.
  if (!writer.status().ok()) return writer.status();
  if (sends.described != sends.works.size()) {
    return absl::InternalError(absl::StrCat(
        "FetchShard: ", sends.works.size() - sends.described, " of ",
        sends.works.size(), " pieces were queued but never described"));
  }
  return sends.WaitFirst(sends.works.size());
}

}  // namespace

ShardSource::ShardSource(Options options) : options_(std::move(options)) {}

ShardSource::~ShardSource() {
  if (crc_thread_.joinable()) crc_thread_.join();
}

absl::Status ShardSource::CheckRequest(const v1::FetchShardRequest& request) {
  if (request.max_chunk_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_bytes: must be >= 0, got ", request.max_chunk_bytes()));
  }
  if (request.shard_index() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index: must be >= 0, got ", request.shard_index()));
  }
  return absl::OkStatus();
}

absl::Status ShardSource::CheckServable(const v1::FetchShardRequest& request,
                                        int rank, int f, int64_t epoch,
                                        int64_t step) {
  if (rank % f != request.shard_index()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard_index: this daemon (rank ", rank, ") holds shard ", rank % f,
        ", not ", request.shard_index(), ": the plan is stale"));
  }
  if (request.epoch() != epoch) {
    return absl::AbortedError(absl::StrCat(
        "epoch: ", request.epoch(), " is not this daemon's epoch ", epoch));
  }
  if (request.step() != step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: the plan asks for step ", request.step(),
        " but this daemon's committed step is ", step, ": the plan is stale"));
  }
  return absl::OkStatus();
}

absl::Status ShardSource::CheckRequesterInReplicaGroup(
    const v1::FetchShardRequest& request, int f, int replica_rank,
    int replica_size) {
  // The requester holds our shard index, so it is a member of our replica
  // group, at rank requester / F there.
  const int peer = request.requester_rank() / f;
  if (request.requester_rank() < 0 ||
      request.requester_rank() % f != request.shard_index() ||
      peer == replica_rank || peer >= replica_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "requester_rank: ", request.requester_rank(),
        " is not another member of shard ", request.shard_index(),
        "'s replica group (F = ", f, ", ", replica_size, " replicas)"));
  }
  return absl::OkStatus();
}

absl::Status ShardSource::CheckStillServing(bool deadline_passed,
                                            int64_t current_epoch,
                                            int64_t epoch, int64_t bytes_sent,
                                            int64_t total) {
  if (deadline_passed) {
    return absl::DeadlineExceededError(
        absl::StrCat("FetchShard: deadline reached after ", bytes_sent, " of ",
                     total, " bytes"));
  }
  if (current_epoch != epoch) {
    return absl::AbortedError(absl::StrCat(
        "FetchShard: the epoch changed from ", epoch, " mid-stream"));
  }
  return absl::OkStatus();
}

absl::Status ShardSource::Serve(
    const v1::FetchShardRequest& request, MonoTime deadline,
    const std::function<bool(const v1::FetchShardResponse&)>& send) {
  if (absl::Status s = CheckRequest(request); !s.ok()) return s;
  Snapshot snapshot = options_.snapshot();
  if (snapshot.engine == nullptr) {
    return absl::FailedPreconditionError(
        "this daemon holds no model: nothing to send");
  }
  const std::shared_ptr<StepEngine> engine = snapshot.engine;
  const int f = engine->config().plan.sharding_factor();
  const int64_t epoch = options_.membership->view().epoch;
  const int64_t step = engine->committed_step();
  if (absl::Status s =
          CheckServable(request, engine->config().rank, f, epoch, step);
      !s.ok()) {
    return s;
  }
  snapshot.header.set_epoch(epoch);
  snapshot.header.set_step(step);
  snapshot.header.set_optimizer_step(step);

  // The payload over this epoch's replica group, when asked and possible.
  std::shared_ptr<comm::Collective> replica;
  if (request.payload_over_replica_group()) {
    replica = options_.replica_group_of(
        epoch, std::min(deadline, MonoNow() + absl::Seconds(5)));
    if (replica != nullptr) {
      if (absl::Status s = CheckRequesterInReplicaGroup(
              request, f, replica->rank(), replica->size());
          !s.ok()) {
        return s;
      }
    }
  }
  bool precomputed = false;
  absl::StatusOr<recovery::ShardStreamWriter> writer =
      OpenWriter(request, snapshot, replica != nullptr, deadline, &precomputed);
  if (!writer.ok()) return writer.status();
  std::printf("shardd rank %d: sending shard %d at step %lld to rank %d %s\n",
              options_.membership->rank(), request.shard_index(),
              static_cast<long long>(step), request.requester_rank(),
              replica == nullptr ? "in the stream"
              : precomputed ? "over the replica group (piece CRCs precomputed)"
                            : "over the replica group");
  std::fflush(stdout);
  int64_t total = 0;
  for (const StepEngine::StateSection& section : engine->StateSections()) {
    total += section.bytes;
  }
  return Stream(*writer, replica, request.requester_rank() / f, epoch, total,
                deadline, send);
}

absl::StatusOr<recovery::ShardStreamWriter> ShardSource::OpenWriter(
    const v1::FetchShardRequest& request, Snapshot& snapshot, bool out_of_band,
    MonoTime deadline, bool* precomputed) {
  // The pieces' CRCs, if computed ahead of this copy (after the
  // replacement's Probe) from this very state and for this piece size.
  std::vector<uint32_t> piece_crcs;
  if (out_of_band && request.resume_from_byte() == 0 &&
      request.max_chunk_bytes() == recovery::kMaxPieceBytesCap) {
    piece_crcs = PieceCrcsFor(snapshot.engine,
                              std::min(deadline, MonoNow() + absl::Seconds(5)));
  }
  *precomputed = !piece_crcs.empty();
  absl::StatusOr<recovery::ShardStreamWriter> writer =
      recovery::ShardStreamWriter::Create(
          snapshot.header, snapshot.sources, request.max_chunk_bytes(),
          request.resume_from_byte(), out_of_band, std::move(piece_crcs),
          *options_.shard_memory);
  if (!writer.ok() && *precomputed) {
    // Not the same pieces after all: compute them while sending.
    writer = recovery::ShardStreamWriter::Create(
        snapshot.header, std::move(snapshot.sources), request.max_chunk_bytes(),
        request.resume_from_byte(), out_of_band, {}, *options_.shard_memory);
  }
  return writer;
}

absl::Status ShardSource::Stream(
    recovery::ShardStreamWriter& writer,
    const std::shared_ptr<comm::Collective>& replica, int peer, int64_t epoch,
    int64_t total, MonoTime deadline,
    const std::function<bool(const v1::FetchShardResponse&)>& send) {
  // Every piece is queued at once, straight from the shard: the
  // communicator sends them one after another while this thread computes
  // the chunks' CRCs. Any failure below aborts the replica group (the
  // epoch's communicators are never mended: its Sends would otherwise hold
  // it until their deadline) and waits for the Sends before returning.
  PieceSends sends;
  if (replica != nullptr) {
    sends.works = QueueSends(*replica, writer, peer, deadline);
  }
  bool ok = false;
  absl::Cleanup abort_unfinished = [&] {
    if (ok || sends.works.empty()) return;
    replica->Abort("a shard copy over the replica group failed");
    WaitAll(sends.works);
  };
  absl::Cleanup report = [&] {
    if (options_.observer == nullptr) return;
    options_.observer->RecoveryBytes(metrics::node_labels::kSent,
                                     writer.bytes_sent());
    options_.observer->RecoveryTransfer(metrics::node_labels::kSource, ok);
  };
  bool fired = false;
  v1::FetchShardResponse message;
  while (writer.Next(&message)) {
    if (!send(message)) {
      return absl::UnavailableError(
          "FetchShard: the receiver closed the stream");
    }
    // Chunks (each piece's CRC) and the trailer go out as soon as they are
    // computed, ahead of the bytes: the receiver checks a piece only once
    // its Recv completed, so nothing waits on them at the end.
    if (message.has_chunk() && !sends.works.empty()) ++sends.described;
    if (!fired && writer.bytes_sent() * 2 >= total) {
      fired = true;
      // Half the bytes out, not only described.
      if (absl::Status sent = sends.WaitFirst(sends.described); !sent.ok()) {
        return sent;
      }
      SHARDD_FAILPOINT("transfer.source.mid");
    }
    if (absl::Status s = CheckStillServing(MonoNow() >= deadline,
                                           options_.membership->view().epoch,
                                           epoch, writer.bytes_sent(), total);
        !s.ok()) {
      return s;
    }
  }
  absl::Status finished = FinishStream(writer, sends);
  ok = finished.ok();
  return finished;
}

void ShardSource::StartPrecompute() {
  absl::MutexLock lock(&crc_mu_);
  if (crc_running_) return;
  crc_running_ = true;
  // The previous computation has finished (it cleared crc_running_ as its
  // last step), so this join does not wait on the lock.
  if (crc_thread_.joinable()) crc_thread_.join();
  crc_thread_ = std::thread([this] { PrecomputePieceCrcs(); });
}

void ShardSource::PrecomputePieceCrcs() {
  std::optional<PieceCrcs> computed;
  Snapshot snapshot = options_.snapshot();
  if (snapshot.engine != nullptr) {
    const std::shared_ptr<StepEngine>& engine = snapshot.engine;
    // Read between two equal versions: no step or install changed the bytes
    // meanwhile (during a recovery no step runs, so this is the usual case).
    const uint64_t version = engine->state_version();
    absl::StatusOr<recovery::ShardStreamWriter> writer =
        recovery::ShardStreamWriter::Create(
            snapshot.header, std::move(snapshot.sources),
            recovery::kMaxPieceBytesCap, 0,
            /*payload_out_of_band=*/true, {}, *options_.shard_memory);
    if (writer.ok()) {
      PieceCrcs crcs{engine, version, {}};
      bool read_all = true;
      for (const recovery::PayloadPiece& piece : writer->PendingPieces()) {
        absl::StatusOr<uint32_t> crc = recovery::ShardCrc32cExtend(
            *options_.shard_memory, 0, piece.data, piece.length);
        if (!crc.ok()) {
          read_all = false;  // Serve computes them while sending.
          break;
        }
        crcs.crcs.push_back(*crc);
      }
      if (read_all && engine->state_version() == version) {
        computed = std::move(crcs);
      }
    }
  }
  absl::MutexLock lock(&crc_mu_);
  if (computed.has_value()) piece_crcs_ = std::move(computed);
  crc_running_ = false;
}

std::vector<uint32_t> ShardSource::PieceCrcsFor(
    const std::shared_ptr<StepEngine>& engine, MonoTime deadline) {
  absl::MutexLock lock(&crc_mu_);
  const auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(crc_mu_) {
    return !crc_running_;
  };
  if (!AwaitUntil(&crc_mu_, absl::Condition(&settled), deadline)) {
    return {};
  }
  if (!piece_crcs_.has_value() || piece_crcs_->engine.lock() != engine ||
      piece_crcs_->state_version != engine->state_version()) {
    return {};
  }
  return piece_crcs_->crcs;
}

}  // namespace shardd::node
