#include "daemon/node/shard_copy.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  for (int source : plan.source_ranks()) {
    last_source = source;
    last = FetchFrom(epoch, plan, source, world, factor, deadline);
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

absl::Status ShardCopy::FetchFrom(int64_t epoch, const v1::ShardTransfer& plan,
                                  int source, int world, int factor,
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
  const int rank = options_.membership->rank();
  // An engine prepared from this source's model (for this W and F), taken
  // here so that a failed attempt does not leave it half-written for the
  // next: that one builds its own.
  std::optional<PreparedEngine> prepared;
  {
    absl::MutexLock lock(&mu_);
    if (prepared_.has_value() && prepared_->world_size == world &&
        prepared_->sharding_factor == factor) {
      prepared = std::move(prepared_);
    }
    prepared_.reset();
  }
  if (!prepared.has_value() || prepared->source != source) {
    // Its Probe said it holds the model; otherwise ask now.
    absl::StatusOr<v1::ProbeResponse> probe = options_.probe_peer(
        address, std::min(deadline, MonoNow() + absl::Seconds(2)),
        /*include_model=*/false);
    if (!probe.ok()) return probe.status();
    if (!probe->registered()) {
      return absl::NotFoundError(absl::StrCat(
          "rank ", source, " holds no model yet: nothing to recover"));
    }
  }
  v1::FetchShardRequest request;
  request.set_epoch(epoch);
  request.set_requester_rank(rank);
  request.set_shard_index(plan.shard_index());
  request.set_step(plan.step());
  // The bytes over our replica group when it is healthy (the source is in
  // it: it holds our shard index); else inside the stream.
  std::shared_ptr<comm::Collective> replica;
  if (options_.over_replica_group && factor > 0) {
    replica = options_.replica_group_of(epoch);
  }
  if (replica != nullptr) {
    request.set_payload_over_replica_group(true);
    request.set_max_chunk_bytes(recovery::kMaxPieceBytesCap);
  }
  std::vector<std::shared_ptr<comm::Work>> recvs;
  size_t pieces_done = 0;
  std::shared_ptr<StepEngine> engine;
  std::vector<StepEngine::StateSection> mine;
  std::optional<core::ModelConfig> model;
  recovery::ShardStreamAssembler assembler(
      [&](const v1::ShardHeader& header,
          int index) -> absl::StatusOr<uint8_t*> {
        if (engine == nullptr) {
          const MonoTime t_create = MonoNow();
          const bool was_prepared =
              prepared.has_value() &&
              prepared->fingerprint == header.model_fingerprint();
          absl::Duration build_time;
          if (was_prepared) {
            build_time = prepared->build_time;
            engine = std::move(prepared->engine);
            model = std::move(prepared->model);
          } else {
            absl::StatusOr<core::ModelConfig> m =
                ProtoConvert::ModelFromProto(header.model());
            if (!m.ok()) return m.status();
            absl::StatusOr<std::unique_ptr<StepEngine>> created =
                options_.create_engine(*m, world, factor);
            if (!created.ok()) return created.status();
            engine = std::move(*created);
            model = *std::move(m);
          }
          prepared.reset();
          mine = engine->StateSections();
          if (!was_prepared) build_time = MonoNow() - t_create;
          std::printf(
              "shardd rank %d: engine ready for the shard copy (%s)\n", rank,
              was_prepared ? "prepared during the rendezvous"
                           : absl::StrFormat("created in %.3f s",
                                             absl::ToDoubleSeconds(build_time))
                                 .c_str());
          std::fflush(stdout);
          // bench/recovery splits the copy at this event: engine vs. stream.
          v1::TrainerEvent event;
          event.set_epoch(epoch);
          v1::CopyEngineReady* ready = event.mutable_copy_engine_ready();
          ready->set_source_rank(source);
          ready->set_prepared_during_rendezvous(was_prepared);
          ready->set_build_seconds(absl::ToDoubleSeconds(build_time));
          options_.events->Append(std::move(event));
          if (static_cast<int>(mine.size()) != header.sections_size()) {
            return absl::FailedPreconditionError(
                absl::StrCat("the source sends ", header.sections_size(),
                             " sections, this rank's shard has ", mine.size()));
          }
        }
        const v1::ShardSection& theirs = header.sections(index);
        const StepEngine::StateSection& ours = mine[index];
        if (theirs.unit() != ours.unit ||
            theirs.kind() != ToSectionKind(ours.kind) ||
            theirs.byte_length() != ours.bytes) {
          return absl::FailedPreconditionError(absl::StrCat(
              "section ", index, " (unit ", theirs.unit(), ", ",
              v1::ShardSectionKind_Name(theirs.kind()), ", ",
              theirs.byte_length(), " bytes) does not match this rank's (unit ",
              ours.unit, ", ", ours.bytes, " bytes)"));
        }
        return ours.data;
      },
      /*resume_from_byte=*/0, /*crc_so_far=*/0, *options_.shard_memory);
  int64_t total = -1;
  bool fired = false;
  {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    event.mutable_recovery()->set_phase(v1::RECOVERY_PHASE_TRANSFERRING_STATE);
    options_.events->Append(std::move(event));
  }
  absl::Status streamed = options_.fetch_shard(
      address, request, deadline,
      [&](const v1::FetchShardResponse& message) -> absl::Status {
        if (message.has_chunk() && !recvs.empty()) {
          // An out-of-band piece: its chunk is checked over the bytes
          // once they are in place.
          if (pieces_done == recvs.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("FetchShard: more chunks than the header's ",
                             recvs.size(), " pieces"));
          }
          if (absl::Status got = recvs[pieces_done++]->Wait(); !got.ok()) {
            return got;
          }
        }
        if (absl::Status s = assembler.Add(message); !s.ok()) return s;
        if (message.has_header()) {
          total = message.header().total_bytes();
          if (message.header().payload_out_of_band()) {
            if (replica == nullptr) {
              return absl::FailedPreconditionError(
                  "FetchShard: the source sends the payload over the replica "
                  "group, which this request did not ask for");
            }
            comm::OpOptions op;
            op.timeout = std::max(deadline - MonoNow(), absl::Milliseconds(1));
            for (const recovery::PayloadPiece& piece :
                 assembler.PendingPieces()) {
              recvs.push_back(replica->Recv(piece.data, piece.length,
                                            source / factor, kShardTransferTag,
                                            op));
            }
          }
        }
        if (!fired && total >= 0 && assembler.verified_bytes() * 2 >= total) {
          fired = true;
          SHARDD_FAILPOINT("transfer.target.mid");
        }
        return absl::OkStatus();
      });
  if (streamed.ok()) streamed = assembler.Finish();
  if (replica != nullptr && !streamed.ok()) {
    // A copy over the replica group failed: end our receives before the
    // engine they write into can go away, and close our pairs so that the
    // source's Sends (queued before its header, perhaps never matched) end
    // now, not at their deadline with its replica group held. The epoch's
    // communicator is never mended; the next source streams inline.
    replica->Abort(absl::StrCat("the shard copy from rank ", source,
                                " failed: ", streamed.ToString()));
    WaitAll(recvs);
  }
  if (options_.observer != nullptr) {
    options_.observer->RecoveryBytes(metrics::node_labels::kReceived,
                                     assembler.verified_bytes());
    options_.observer->RecoveryTransfer(metrics::node_labels::kTarget,
                                        streamed.ok());
  }
  if (!streamed.ok()) return streamed;
  const v1::ShardHeader& header = assembler.header();
  if (absl::Status s = engine->InstallState(header.step()); !s.ok()) return s;
  const uint64_t fingerprint =
      core::Fingerprint(*model, core::InitScope::kExclude);
  if (fingerprint != header.model_fingerprint()) {
    return absl::DataLossError(
        absl::StrCat("the model in the stream has fingerprint ", fingerprint,
                     " but the source announced ", header.model_fingerprint()));
  }
  options_.install(engine, *std::move(model), fingerprint, header.step(),
                   epoch);
  const double seconds = absl::ToDoubleSeconds(MonoNow() - started);
  std::printf(
      "shardd rank %d recovered shard %d at step %lld from rank %d: %lld "
      "bytes in %.3f s (%.1f MB/s, %s)\n",
      rank, plan.shard_index(), static_cast<long long>(header.step()), source,
      static_cast<long long>(header.total_bytes()), seconds,
      seconds > 0 ? header.total_bytes() / seconds / 1e6 : 0.0,
      header.payload_out_of_band() ? "over the replica group"
                                   : "in the stream");
  std::fflush(stdout);
  v1::TrainerEvent event;
  event.set_epoch(epoch);
  v1::RecoveryProgress* progress = event.mutable_recovery();
  progress->set_phase(v1::RECOVERY_PHASE_COMPLETE);
  progress->set_bytes_done(header.total_bytes());
  progress->set_bytes_total(header.total_bytes());
  options_.events->Append(std::move(event));
  return absl::OkStatus();
}

}  // namespace shardd::node
