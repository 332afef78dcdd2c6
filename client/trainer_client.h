#ifndef SHARDD_CLIENT_TRAINER_CLIENT_H_
#define SHARDD_CLIENT_TRAINER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/segment_cache.h"
#include "daemon/core/mono_time.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::client {

struct TrainerClientOptions {
  // "unix:/path/to/shardd.sock", "host:port", or an absolute socket path
  // (taken as unix:PATH).
  std::string target = "unix:/dev/shm/shardd.sock";
  // Deadline of every call that does not pass its own.
  absl::Duration default_timeout = absl::Seconds(30);
  // RegisterModel waits for every rank: it gets this longer default.
  absl::Duration register_timeout = absl::Minutes(2);
  // Credentials of a host:port target: rpc::TlsConfig::ChannelCredentials
  // when the daemon's --listen_tcp uses TLS (keep that TlsConfig while the
  // client lives: it reloads rotated files). Null: insecure. A unix: target
  // ignores them (the socket's file mode, 0600, is its access control).
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
  // Who writes a GPU gradient slot (segment_cache.h): a trainer that
  // computes on the host (the default) or one that writes device_data.
  GradWriter grad_writer = GradWriter::kHost;
};

// A unit gathered by the daemon: its parameters (read-only fp32 views into
// the daemon's shared memory) and, for a BACKWARD gather, the gradient slot
// to write the unit's full gradient into before ReduceGrad.
struct GatheredUnit {
  int unit = 0;
  UnitView params;
  std::optional<GradView> grad;  // BACKWARD gathers only.
  v1::GatherResponse response;   // The reply as received.
};

// A Gather in flight (prefetch): the RPC runs on its own thread.
// Wait(deadline) returns the result, or DEADLINE_EXCEEDED if it has not come
// by then (the RPC itself carries the call's deadline and ends by it; Wait
// may be called again). Move-only; destruction waits for the RPC, which is
// bounded by the call's deadline.
class PendingGather {
 public:
  PendingGather() = default;
  explicit PendingGather(std::future<absl::StatusOr<GatheredUnit>> future)
      : future_(std::move(future)) {}
  PendingGather(PendingGather&&) = default;
  PendingGather& operator=(PendingGather&&) = default;

  bool valid() const { return future_.valid(); }
  // Waits until `deadline` (at most). Consumes the result: after an OK or
  // error result the handle is no longer valid().
  absl::StatusOr<GatheredUnit> Wait(MonoTime deadline);

 private:
  std::future<absl::StatusOr<GatheredUnit>> future_;
};

// Client of a shardd daemon's Trainer service (proto/shardd/v1/trainer.proto).
//
// Every call carries a deadline (the options' default unless given) and
// returns the daemon's gRPC status with the same code and message. When
// nothing answers at the target (no socket file, connection refused, the
// daemon exited), calls fail with UNAVAILABLE and the message "no shardd
// daemon at <target> (<detail>)"; a call the daemon's server cancelled
// (it does so when it stops) fails with UNAVAILABLE too, "the shardd daemon
// at <target> cancelled the call (it is stopping)". IsDaemonUnreachable
// (status) tells both apart from an UNAVAILABLE the daemon itself returned:
// the caller re-attaches.
//
// Data plane: Gather's replies name shared-memory segments; the client maps
// each once (SegmentCache, by path and generation) and returns typed views,
// validated against the segment (INVALID_ARGUMENT / DATA_LOSS when a reply's
// ranges do not fit).
//
// Thread-safety: all methods may be called from any thread at once (gRPC
// stubs and the segment cache are thread-safe); GatherAsync runs the RPC on
// a thread of its own. Ownership: owns its channel and mappings; views
// returned keep their mapping alive.
// One Trainer.WatchEvents stream (TrainerClient::WatchEvents). Next reads
// the events in order; Cancel, from any thread, ends a Next in progress.
// Thread-safe for Cancel only; owns its call.
class EventStream {
 public:
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // The next event; false when the stream has ended (Finish says why).
  bool Next(v1::TrainerEvent* event) { return reader_->Read(event); }
  void Cancel() { context_.TryCancel(); }
  // After Next returned false: how the stream ended (CANCELLED after
  // Cancel, DEADLINE_EXCEEDED at the deadline).
  absl::Status Finish();

 private:
  friend class TrainerClient;
  EventStream() = default;

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::TrainerEvent>> reader_;
};

class TrainerClient {
 public:
  // Creates the channel; does not connect (the first call does).
  static absl::StatusOr<std::unique_ptr<TrainerClient>> Create(
      TrainerClientOptions options);

  const std::string& target() const { return target_; }

  // Blocks up to the deadline for the channel to connect: OK, or the
  // "no shardd daemon" UNAVAILABLE.
  absl::Status WaitConnected(MonoTime deadline);

  absl::StatusOr<v1::RegisterModelResponse> RegisterModel(
      const v1::RegisterModelRequest& request,
      std::optional<MonoTime> deadline = std::nullopt);

  // Gathers `unit` (with prefetch hints) and maps its buffers.
  absl::StatusOr<GatheredUnit> Gather(
      int unit, v1::Pass pass, const std::vector<int>& prefetch = {},
      std::optional<MonoTime> deadline = std::nullopt);
  // The same with every field of the request (e.g. `release_first`).
  absl::StatusOr<GatheredUnit> Gather(
      const v1::GatherRequest& request,
      std::optional<MonoTime> deadline = std::nullopt);
  // Gather(unit, pass, prefetch), running on another thread.
  PendingGather GatherAsync(int unit, v1::Pass pass,
                            std::vector<int> prefetch = {},
                            std::optional<MonoTime> deadline = std::nullopt);

  absl::StatusOr<v1::ReleaseResponse> Release(
      int unit, v1::Pass pass, std::optional<MonoTime> deadline = std::nullopt);
  // The same with every field of the request (e.g. `reshard`).
  absl::StatusOr<v1::ReleaseResponse> Release(
      const v1::ReleaseRequest& request,
      std::optional<MonoTime> deadline = std::nullopt);

  // Hands the daemon the gradient written into `gradient_slot` (the DataRef
  // of a BACKWARD Gather's grad_buffer).
  absl::StatusOr<v1::ReduceGradResponse> ReduceGrad(
      int unit, const v1::DataRef& gradient_slot, bool accumulate_only = false,
      std::optional<MonoTime> deadline = std::nullopt);
  // The same with every field of the request (e.g. `release`).
  absl::StatusOr<v1::ReduceGradResponse> ReduceGrad(
      const v1::ReduceGradRequest& request,
      std::optional<MonoTime> deadline = std::nullopt);

  absl::StatusOr<v1::StepResponse> Step(
      int64_t step, std::optional<double> learning_rate = std::nullopt,
      std::optional<MonoTime> deadline = std::nullopt);

  absl::StatusOr<v1::WaitReadyResponse> WaitReady(
      int64_t min_epoch = 0, std::optional<MonoTime> deadline = std::nullopt);

  absl::StatusOr<v1::ExportStateResponse> ExportState(
      const v1::ExportStateRequest& request,
      std::optional<MonoTime> deadline = std::nullopt);

  absl::StatusOr<v1::GetStatusResponse> GetStatus(
      std::optional<MonoTime> deadline = std::nullopt);

  // Opens a WatchEvents stream that lasts until `deadline`.
  std::unique_ptr<EventStream> WatchEvents(
      const v1::WatchEventsRequest& request, MonoTime deadline);

  SegmentCache& segments() { return segments_; }

  // True for the UNAVAILABLE that means nothing answers at the target.
  static bool IsDaemonUnreachable(const absl::Status& status);
  // True for the daemon's DATA_LOSS marked as the job's (the trailer
  // rpc::kJobFailedTrailer): the job has FAILED for good (terminal; the
  // message names the reason). A trainer stops, does not retry, and exits
  // non-zero. Another DATA_LOSS (a corrupt load_from file, or this client's
  // own: a reply that does not fit its segment) is not this.
  static bool IsJobFailed(const absl::Status& status);
  // `status` with its message prefixed by "`context`: " (e.g. which call
  // failed), the same code and every mark the predicates above read. A
  // status rebuilt from code and message alone loses them: the job's
  // terminal DATA_LOSS would become a plain one, and a trainer would exit
  // as for an ordinary error (and be restarted) instead of stopping.
  static absl::Status WithContext(const absl::Status& status,
                                  absl::string_view context);

  // "unix:/a/b" for "/a/b"; anything else unchanged.
  static std::string NormalizeTarget(absl::string_view target);

 private:
  TrainerClient(TrainerClientOptions options, std::string target,
                std::shared_ptr<grpc::Channel> channel);

  // The call's deadline, and this process's attachment (the last
  // RegisterModel's, as metadata rpc::kAttachmentMetadata) once it has one.
  void Prepare(grpc::ClientContext& context,
               std::optional<MonoTime> deadline) const;
  // gRPC status -> absl::Status (same code), rewriting connection failures
  // into the "no shardd daemon" message.
  absl::Status Convert(const grpc::Status& status,
                       const grpc::ClientContext& context) const;

  TrainerClientOptions options_;
  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Trainer::Stub> stub_;
  SegmentCache segments_;
  // RegisterModelResponse.attachment of the last registration (0: none).
  std::atomic<uint64_t> attachment_{0};
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_TRAINER_CLIENT_H_
