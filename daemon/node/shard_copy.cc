#include "daemon/node/shard_copy.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/progress_throttle.h"
#include "daemon/node/proto_convert.h"
#include "daemon/recovery/failpoint.h"
#include "daemon/recovery/shard_stream.h"

namespace shardd::node {

ShardCopy::ShardCopy(Options options) : options_(std::move(options)) {}

bool ShardCopy::prepared() const {
  absl::MutexLock lock(&mu_);
  return prepared_.has_value();
}

std::string ShardCopy::AddressOf(int rank) const {
  for (const v1::MemberInfo& m : options_.membership->view().members) {
    if (m.rank() == rank) return m.peer_address();
  }
  return "";
}

void ShardCopy::Prepare(const v1::ShardTransfer& plan, int world, int factor) {
  if (!options_.probe_peer || plan.source_ranks_size() == 0) return;
  const MonoTime started = MonoNow();
  const int source = plan.source_ranks(0);
  const std::string address = AddressOf(source);
  if (address.empty()) return;
  absl::StatusOr<v1::ProbeResponse> probe = options_.probe_peer(
      address, MonoNow() + absl::Seconds(2), /*include_model=*/true);
  if (!probe.ok() || !probe->registered() || !probe->has_model()) return;
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(probe->model());
  if (!model.ok()) return;
  absl::StatusOr<std::unique_ptr<StepEngine>> created =
      options_.create_engine(*model, world, factor);
  if (!created.ok()) return;
  const absl::Duration build_time = MonoNow() - started;
  std::printf(
      "shardd rank %d: engine prepared in %.3f s while the epoch's "
      "communicators formed\n",
      options_.membership->rank(), absl::ToDoubleSeconds(build_time));
  std::fflush(stdout);
  absl::MutexLock lock(&mu_);
  prepared_ = PreparedEngine{.engine = std::move(*created),
                             .model = *std::move(model),
                             .fingerprint = probe->model_fingerprint(),
                             .source = source,
                             .world_size = world,
                             .sharding_factor = factor,
                             .build_time = build_time};
}

absl::StatusOr<bool> ShardCopy::Run(int64_t epoch,
                                    const v1::ShardTransfer& plan, int world,
                                    int factor) {
  const MonoTime deadline = MonoNow() + options_.recovery_timeout;
  absl::Status last = absl::UnavailableError("no source in the plan");
  int last_source = -1;
  int number = 0;
  for (int source : plan.source_ranks()) {
    last_source = source;
    last = FetchFrom(epoch, plan, source, ++number, world, factor, deadline);
    if (last.ok() || absl::IsNotFound(last)) break;
    std::fprintf(stderr,
                 "shardd: shard copy from rank %d failed: %s; trying the "
                 "next source\n",
                 source, last.ToString().c_str());
    if (options_.membership->view().epoch != epoch || MonoNow() >= deadline) {
      break;
    }
  }
  // The replicas hold no model yet: there is nothing to copy.
  if (absl::IsNotFound(last)) return false;
  if (!last.ok()) {
    if (options_.membership->view().epoch == epoch && last_source >= 0) {
      (void)options_.membership->ReportFailure(
          last_source, v1::FAILURE_KIND_TRANSFER_FAILED, last.message(), epoch);
    }
    return last;
  }
  return true;
}

// What the stream's two callbacks (the assembler's destinations and
// FetchShard's per-message handler) share during one attempt. The members
// are destroyed in reverse order, as the locals they replace were: the
// engine before the receives that wrote into it (those were waited for).
struct ShardCopy::Attempt {
  int64_t epoch = 0;
  int source = -1;
  int number = 0;  // 1 for the run's first source, 2 for the next, ...
  int world = 0;
  int factor = 0;
  MonoTime deadline = MonoTime();
  // Prepare's engine, taken so that a failed attempt does not leave it
  // half-written for the next: that one builds its own.
  std::optional<PreparedEngine> prepared = std::nullopt;
  // Our replica group when the payload comes over it; null: in the stream.
  std::shared_ptr<comm::Collective> replica = nullptr;
  // One Recv per out-of-band piece, and how many of them were waited for.
  std::vector<std::shared_ptr<comm::Work>> recvs = {};
  size_t pieces_done = 0;
  // Built (or taken from `prepared`) when the header arrives.
  std::shared_ptr<StepEngine> engine = nullptr;
  std::vector<StepEngine::StateSection> mine = {};
  std::optional<core::ModelConfig> model = std::nullopt;
  int64_t total = -1;   // The header's total bytes; -1 before it.
  bool fired = false;   // The mid-copy fail point ran.
  int64_t counted = 0;  // Verified bytes added to the received metric.
  // Which byte counts become events; made when the header arrives.
  std::optional<ProgressThrottle> progress = std::nullopt;
};

v1::FetchShardRequest ShardCopy::RequestFor(int64_t epoch, int requester_rank,
                                            const v1::ShardTransfer& plan,
                                            bool over_replica_group) {
  v1::FetchShardRequest request;
  request.set_epoch(epoch);
  request.set_requester_rank(requester_rank);
  request.set_shard_index(plan.shard_index());
  request.set_step(plan.step());
  if (over_replica_group) {
    request.set_payload_over_replica_group(true);
    request.set_max_chunk_bytes(recovery::kMaxPieceBytesCap);
  }
  return request;
}

absl::Status ShardCopy::CheckSectionCount(int theirs, size_t ours) {
  if (static_cast<int>(ours) != theirs) {
    return absl::FailedPreconditionError(
        absl::StrCat("the source sends ", theirs,
                     " sections, this rank's shard has ", ours));
  }
  return absl::OkStatus();
}

absl::Status ShardCopy::CheckSection(const v1::ShardSection& theirs,
                                     const StepEngine::StateSection& ours,
                                     int index) {
  if (theirs.unit() != ours.unit || theirs.kind() != ToSectionKind(ours.kind) ||
      theirs.byte_length() != ours.bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "section ", index, " (unit ", theirs.unit(), ", ",
        v1::ShardSectionKind_Name(theirs.kind()), ", ", theirs.byte_length(),
        " bytes) does not match this rank's (unit ", ours.unit, ", ",
        ours.bytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ShardCopy::FetchFrom(int64_t epoch, const v1::ShardTransfer& plan,
                                  int source, int number, int world, int factor,
                                  MonoTime deadline) {
  if (!options_.fetch_shard || !options_.probe_peer) {
    return absl::FailedPreconditionError(
        "this daemon was started without a Peer client");
  }
  const std::string address = AddressOf(source);
  if (address.empty()) {
    return absl::UnavailableError(
        absl::StrCat("source rank ", source, " is not a live member"));
  }
  const MonoTime started = MonoNow();
  Attempt attempt{.epoch = epoch,
                  .source = source,
                  .number = number,
                  .world = world,
                  .factor = factor,
                  .deadline = deadline,
                  .prepared = TakePrepared(world, factor)};
  if (!attempt.prepared.has_value() || attempt.prepared->source != source) {
    // Its Probe said it holds the model; otherwise ask now.
    if (absl::Status s = CheckSourceHoldsModel(address, source, deadline);
        !s.ok()) {
      return s;
    }
  }
  // The bytes over our replica group when it is healthy (the source is in
  // it: it holds our shard index); else inside the stream.
  if (options_.over_replica_group && factor > 0) {
    attempt.replica = options_.replica_group_of(epoch);
  }
  const v1::FetchShardRequest request = RequestFor(
      epoch, options_.membership->rank(), plan, attempt.replica != nullptr);
  recovery::ShardStreamAssembler assembler(
      [this, &attempt](const v1::ShardHeader& header, int index) {
        return SectionDestination(attempt, header, index);
      },
      /*resume_from_byte=*/0, /*crc_so_far=*/0, *options_.shard_memory);
  AnnounceTransferring(attempt);
  absl::Status streamed = options_.fetch_shard(
      address, request, deadline, [&](const v1::FetchShardResponse& message) {
        return OnMessage(attempt, assembler, message);
      });
  if (streamed.ok()) streamed = assembler.Finish();
  if (attempt.replica != nullptr && !streamed.ok()) {
    AbandonReceives(attempt, streamed);
  }
  RecordTransfer(attempt, assembler.verified_bytes(), streamed.ok());
  if (!streamed.ok()) return streamed;
  if (absl::Status s = InstallCopy(attempt, assembler.header()); !s.ok()) {
    return s;
  }
  AnnounceCopied(attempt, plan.shard_index(), assembler.header(),
                 MonoNow() - started);
  return absl::OkStatus();
}

std::optional<ShardCopy::PreparedEngine> ShardCopy::TakePrepared(int world,
                                                                 int factor) {
  std::optional<PreparedEngine> taken;
  absl::MutexLock lock(&mu_);
  if (prepared_.has_value() && prepared_->world_size == world &&
      prepared_->sharding_factor == factor) {
    taken = std::move(prepared_);
  }
  prepared_.reset();
  return taken;
}

absl::Status ShardCopy::CheckSourceHoldsModel(const std::string& address,
                                              int source, MonoTime deadline) {
  absl::StatusOr<v1::ProbeResponse> probe = options_.probe_peer(
      address, std::min(deadline, MonoNow() + absl::Seconds(2)),
      /*include_model=*/false);
  if (!probe.ok()) return probe.status();
  if (!probe->registered()) {
    return absl::NotFoundError(absl::StrCat(
        "rank ", source, " holds no model yet: nothing to recover"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> ShardCopy::SectionDestination(
    Attempt& attempt, const v1::ShardHeader& header, int index) {
  // The header's first section: only now is the source's model known.
  if (attempt.engine == nullptr) {
    if (absl::Status s = ReadyEngine(attempt, header); !s.ok()) return s;
  }
  const StepEngine::StateSection& ours = attempt.mine[index];
  if (absl::Status s = CheckSection(header.sections(index), ours, index);
      !s.ok()) {
    return s;
  }
  return ours.data;
}

// The engine the copy fills: the prepared one when it was built for the
// model the header announces (same fingerprint), else a new one.
absl::Status ShardCopy::ReadyEngine(Attempt& attempt,
                                    const v1::ShardHeader& header) {
  const MonoTime t_create = MonoNow();
  const bool was_prepared =
      attempt.prepared.has_value() &&
      attempt.prepared->fingerprint == header.model_fingerprint();
  absl::Duration build_time;
  if (was_prepared) {
    build_time = attempt.prepared->build_time;
    attempt.engine = std::move(attempt.prepared->engine);
    attempt.model = std::move(attempt.prepared->model);
  } else {
    absl::StatusOr<core::ModelConfig> m =
        ProtoConvert::ModelFromProto(header.model());
    if (!m.ok()) return m.status();
    absl::StatusOr<std::unique_ptr<StepEngine>> created =
        options_.create_engine(*m, attempt.world, attempt.factor);
    if (!created.ok()) return created.status();
    attempt.engine = std::move(*created);
    attempt.model = *std::move(m);
  }
  attempt.prepared.reset();
  attempt.mine = attempt.engine->StateSections();
  if (!was_prepared) build_time = MonoNow() - t_create;
  AnnounceEngineReady(attempt, was_prepared, build_time);
  return CheckSectionCount(header.sections_size(), attempt.mine.size());
}

void ShardCopy::AnnounceTransferring(const Attempt& attempt) {
  v1::TrainerEvent event;
  event.set_epoch(attempt.epoch);
  v1::RecoveryProgress* progress = event.mutable_recovery();
  progress->set_phase(v1::RECOVERY_PHASE_TRANSFERRING_STATE);
  progress->set_attempt(attempt.number);
  progress->set_source_rank(attempt.source);
  options_.events->Append(std::move(event));
}

void ShardCopy::ReportBytes(Attempt& attempt, int64_t done) {
  if (!attempt.progress.has_value() ||
      !attempt.progress->ShouldReport(done, options_.clock->MonotonicNow())) {
    return;
  }
  v1::TrainerEvent event;
  event.set_epoch(attempt.epoch);
  v1::RecoveryProgress* progress = event.mutable_recovery();
  progress->set_phase(v1::RECOVERY_PHASE_TRANSFERRING_STATE);
  progress->set_bytes_done(done);
  progress->set_bytes_total(attempt.progress->total_bytes());
  progress->set_attempt(attempt.number);
  progress->set_source_rank(attempt.source);
  options_.events->Append(std::move(event));
}

void ShardCopy::AnnounceEngineReady(const Attempt& attempt, bool was_prepared,
                                    absl::Duration build_time) {
  std::printf("shardd rank %d: engine ready for the shard copy (%s)\n",
              options_.membership->rank(),
              was_prepared ? "prepared during the rendezvous"
                           : absl::StrFormat("created in %.3f s",
                                             absl::ToDoubleSeconds(build_time))
                                 .c_str());
  std::fflush(stdout);
  // bench/recovery splits the copy at this event: engine vs. stream.
  v1::TrainerEvent event;
  event.set_epoch(attempt.epoch);
  v1::CopyEngineReady* ready = event.mutable_copy_engine_ready();
  ready->set_source_rank(attempt.source);
  ready->set_prepared_during_rendezvous(was_prepared);
  ready->set_build_seconds(absl::ToDoubleSeconds(build_time));
  options_.events->Append(std::move(event));
}

absl::Status ShardCopy::OnMessage(Attempt& attempt,
                                  recovery::ShardStreamAssembler& assembler,
                                  const v1::FetchShardResponse& message) {
  if (message.has_chunk() && !attempt.recvs.empty()) {
    if (absl::Status got = AwaitNextPiece(attempt); !got.ok()) return got;
  }
  if (absl::Status s = assembler.Add(message); !s.ok()) return s;
  if (message.has_header()) {
    attempt.total = message.header().total_bytes();
    attempt.progress.emplace(attempt.total);
    if (message.header().payload_out_of_band()) {
      if (absl::Status s = PostReceives(attempt, assembler); !s.ok()) return s;
    }
  }
  if (!attempt.fired && attempt.total >= 0 &&
      assembler.verified_bytes() * 2 >= attempt.total) {
    attempt.fired = true;
    SHARDD_FAILPOINT("transfer.target.mid");
  }
  // Chunks count once verified (out of band: once their piece is in); after
  // the fail point, so that a copy slowed there (sleep) reports the half
  // it holds when it goes on.
  ReportBytes(attempt, assembler.verified_bytes());
  CountBytes(attempt, assembler.verified_bytes());
  return absl::OkStatus();
}

// An out-of-band piece's chunk is checked over the bytes once they are in
// place: its Recv (the next, in order) must have completed first.
absl::Status ShardCopy::AwaitNextPiece(Attempt& attempt) {
  if (attempt.pieces_done == attempt.recvs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FetchShard: more chunks than the header's ",
                     attempt.recvs.size(), " pieces"));
  }
  return attempt.recvs[attempt.pieces_done++]->Wait();
}

// The header said the payload comes over the replica group: one Recv per
// piece, straight into the engine's sections, all posted at once.
absl::Status ShardCopy::PostReceives(
    Attempt& attempt, const recovery::ShardStreamAssembler& assembler) {
  if (attempt.replica == nullptr) {
    return absl::FailedPreconditionError(
        "FetchShard: the source sends the payload over the replica "
        "group, which this request did not ask for");
  }
  comm::OpOptions op;
  op.timeout = std::max(attempt.deadline - MonoNow(), absl::Milliseconds(1));
  for (const recovery::PayloadPiece& piece : assembler.PendingPieces()) {
    attempt.recvs.push_back(attempt.replica->Recv(
        piece.data, piece.length, attempt.source / attempt.factor,
        kShardTransferTag, op));
  }
  return absl::OkStatus();
}

// A copy over the replica group failed: end our receives before the engine
// they write into can go away, and close our pairs so that the source's
// Sends (queued before its header, perhaps never matched) end now, not at
// their deadline with its replica group held. The epoch's communicator is
// never mended; the next source streams inline.
void ShardCopy::AbandonReceives(Attempt& attempt, const absl::Status& failure) {
  attempt.replica->Abort(absl::StrCat("the shard copy from rank ",
                                      attempt.source,
                                      " failed: ", failure.ToString()));
  WaitAll(attempt.recvs);
}

void ShardCopy::CountBytes(Attempt& attempt, int64_t verified_bytes) {
  if (options_.observer == nullptr || verified_bytes <= attempt.counted) {
    return;
  }
  options_.observer->RecoveryBytes(metrics::node_labels::kReceived,
                                   verified_bytes - attempt.counted);
  attempt.counted = verified_bytes;
}

void ShardCopy::RecordTransfer(Attempt& attempt, int64_t verified_bytes,
                               bool ok) {
  if (options_.observer == nullptr) return;
  CountBytes(attempt, verified_bytes);
  options_.observer->RecoveryTransfer(metrics::node_labels::kTarget, ok);
}

// Every piece verified: the engine takes the copied step, and the model it
// was built for must be the one the source announced before it is the
// node's.
absl::Status ShardCopy::InstallCopy(Attempt& attempt,
                                    const v1::ShardHeader& header) {
  if (absl::Status s = attempt.engine->InstallState(header.step()); !s.ok()) {
    return s;
  }
  const uint64_t fingerprint =
      core::Fingerprint(*attempt.model, core::InitScope::kExclude);
  if (fingerprint != header.model_fingerprint()) {
    return absl::DataLossError(
        absl::StrCat("the model in the stream has fingerprint ", fingerprint,
                     " but the source announced ", header.model_fingerprint()));
  }
  options_.install(attempt.engine, *std::move(attempt.model), fingerprint,
                   header, attempt.epoch);
  return absl::OkStatus();
}

void ShardCopy::AnnounceCopied(const Attempt& attempt, int shard_index,
                               const v1::ShardHeader& header,
                               absl::Duration took) {
  const double seconds = absl::ToDoubleSeconds(took);
  std::printf(
      "shardd rank %d recovered shard %d at step %lld from rank %d: %lld "
      "bytes in %.3f s (%.1f MB/s, %s)\n",
      options_.membership->rank(), shard_index,
      static_cast<long long>(header.step()), attempt.source,
      static_cast<long long>(header.total_bytes()), seconds,
      seconds > 0 ? header.total_bytes() / seconds / 1e6 : 0.0,
      header.payload_out_of_band() ? "over the replica group"
                                   : "in the stream");
  std::fflush(stdout);
  v1::TrainerEvent event;
  event.set_epoch(attempt.epoch);
  v1::RecoveryProgress* progress = event.mutable_recovery();
  progress->set_phase(v1::RECOVERY_PHASE_COMPLETE);
  progress->set_bytes_done(header.total_bytes());
  progress->set_bytes_total(header.total_bytes());
  progress->set_attempt(attempt.number);
  progress->set_source_rank(attempt.source);
  options_.events->Append(std::move(event));
}

}  // namespace shardd::node
