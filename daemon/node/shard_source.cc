#include "daemon/node/shard_source.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {

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
  const int rank = engine->config().rank;
  if (rank % f != request.shard_index()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard_index: this daemon (rank ", rank, ") holds shard ", rank % f,
        ", not ", request.shard_index(), ": the plan is stale"));
  }
  v1::ShardHeader& header = snapshot.header;
  const int64_t epoch = options_.membership->view().epoch;
  if (request.epoch() != epoch) {
    return absl::AbortedError(absl::StrCat(
        "epoch: ", request.epoch(), " is not this daemon's epoch ", epoch));
  }
  const int64_t step = engine->committed_step();
  if (request.step() != step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: the plan asks for step ", request.step(),
        " but this daemon's committed step is ", step, ": the plan is stale"));
  }
  header.set_epoch(epoch);
  header.set_step(step);
  header.set_optimizer_step(step);

  // The payload over this epoch's replica group, when asked and possible:
  // the requester holds our shard index, so it is a member of our replica
  // group (rank requester / F there).
  std::shared_ptr<comm::Collective> replica;
  int peer = -1;
  if (request.payload_over_replica_group()) {
    replica = options_.replica_group_of(
        epoch, std::min(deadline, MonoNow() + absl::Seconds(5)));
    peer = request.requester_rank() / f;
    if (replica != nullptr &&
        (request.requester_rank() < 0 ||
         request.requester_rank() % f != request.shard_index() ||
         peer == replica->rank() || peer >= replica->size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "requester_rank: ", request.requester_rank(),
          " is not another member of shard ", request.shard_index(),
          "'s replica group (F = ", f, ", ", replica->size(), " replicas)"));
    }
  }
  // The pieces' CRCs, if computed ahead of this copy (after the
  // replacement's Probe) from this very state and for this piece size.
  std::vector<uint32_t> piece_crcs;
  if (replica != nullptr && request.resume_from_byte() == 0 &&
      request.max_chunk_bytes() == recovery::kMaxPieceBytesCap) {
    piece_crcs =
        PieceCrcsFor(engine, std::min(deadline, MonoNow() + absl::Seconds(5)));
  }
  const bool precomputed = !piece_crcs.empty();
  absl::StatusOr<recovery::ShardStreamWriter> writer =
      recovery::ShardStreamWriter::Create(
          header, snapshot.sources, request.max_chunk_bytes(),
          request.resume_from_byte(),
          /*payload_out_of_band=*/replica != nullptr, std::move(piece_crcs),
          *options_.shard_memory);
  if (!writer.ok() && precomputed) {
    // Not the same pieces after all: compute them while sending.
    writer = recovery::ShardStreamWriter::Create(
        header, std::move(snapshot.sources), request.max_chunk_bytes(),
        request.resume_from_byte(),
        /*payload_out_of_band=*/replica != nullptr, {}, *options_.shard_memory);
  }
  if (!writer.ok()) return writer.status();
  std::printf("shardd rank %d: sending shard %d at step %lld to rank %d %s\n",
              options_.membership->rank(), request.shard_index(),
              static_cast<long long>(step), request.requester_rank(),
              replica == nullptr ? "in the stream"
              : precomputed ? "over the replica group (piece CRCs precomputed)"
                            : "over the replica group");
  std::fflush(stdout);
  // Every piece is queued at once, straight from the shard: the
  // communicator sends them one after another while this thread computes
  // the chunks' CRCs. Any failure below aborts the replica group (the
  // epoch's communicators are never mended: its Sends would otherwise hold
  // it until their deadline) and waits for the Sends before returning.
  std::vector<std::shared_ptr<comm::Work>> sends;
  if (replica != nullptr) {
    comm::OpOptions op;
    op.timeout = std::max(deadline - MonoNow(), absl::Milliseconds(1));
    for (const recovery::PayloadPiece& piece : writer->PendingPieces()) {
      sends.push_back(
          replica->Send(piece.data, piece.length, peer, kShardTransferTag, op));
    }
  }
  bool ok = false;
  absl::Cleanup abort_unfinished = [&] {
    if (ok || sends.empty()) return;
    replica->Abort("a shard copy over the replica group failed");
    WaitAll(sends);
  };
  absl::Cleanup report = [&] {
    if (options_.observer == nullptr) return;
    options_.observer->RecoveryBytes(metrics::node_labels::kSent,
                                     writer->bytes_sent());
    options_.observer->RecoveryTransfer(metrics::node_labels::kSource, ok);
  };
  // Pieces whose chunk was written, and whose Send was waited for.
  size_t pieces_described = 0;
  size_t pieces_sent = 0;
  auto wait_sends = [&](size_t n) -> absl::Status {
    for (; pieces_sent < n; ++pieces_sent) {
      if (absl::Status s = sends[pieces_sent]->Wait(); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  int64_t total = 0;
  for (const StepEngine::StateSection& section : engine->StateSections()) {
    total += section.bytes;
  }
  bool fired = false;
  v1::FetchShardResponse message;
  while (writer->Next(&message)) {
    if (!send(message)) {
      return absl::UnavailableError(
          "FetchShard: the receiver closed the stream");
    }
    // Chunks (each piece's CRC) and the trailer go out as soon as they are
    // computed, ahead of the bytes: the receiver checks a piece only once
    // its Recv completed, so nothing waits on them at the end.
    if (message.has_chunk() && !sends.empty()) ++pieces_described;
    if (!fired && writer->bytes_sent() * 2 >= total) {
      fired = true;
      // Half the bytes out, not only described.
      if (absl::Status sent = wait_sends(pieces_described); !sent.ok()) {
        return sent;
      }
      SHARDD_FAILPOINT("transfer.source.mid");
    }
    if (MonoNow() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("FetchShard: deadline reached after ",
                       writer->bytes_sent(), " of ", total, " bytes"));
    }
    if (options_.membership->view().epoch != epoch) {
      return absl::AbortedError(absl::StrCat(
          "FetchShard: the epoch changed from ", epoch, " mid-stream"));
    }
  }
  // Reading the shard's memory (a GPU's, through the engine's math) failed.
  if (!writer->status().ok()) return writer->status();
  if (pieces_described != sends.size()) {
    return absl::InternalError(
        absl::StrCat("FetchShard: ", sends.size() - pieces_described, " of ",
                     sends.size(), " pieces were queued but never described"));
  }
  if (absl::Status sent = wait_sends(sends.size()); !sent.ok()) return sent;
  ok = true;
  return absl::OkStatus();
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
