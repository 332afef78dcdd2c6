// shardctl: inspects and drives a local shardd daemon over its Trainer API,
// and shows the whole cluster as its coordinator sees it.
//
//   shardctl [--socket=/dev/shm/shardd.sock] status|units|memory|members
//   shardctl export --path=/abs/file [--layout=full|sharded]
//       [--sockets=A,B,...] [--deadline=30m] [--other_ranks_join]
//     (waits for the export with a progress bar; a FULL export is
//     collective: --sockets drives every rank's daemon at once, or run it
//     with --other_ranks_join on every node at the same time)
//   shardctl watch [--after=SEQ] [--for=DURATION]
//     (follows the daemon's events, one line each, until Ctrl-C/SIGTERM or
//     --for; an export or shard copy in progress is a progress bar on a
//     terminal; a copy's reports name the source rank, and a retry from
//     another source, from 0 bytes again, its attempt number and a bar of
//     its own)
//   shardctl cluster --coordinator=HOST:PORT [--decisions=N]
//     (the coordinator's GetClusterState: members, broken links, recent
//     decisions as a timeline)
//   shardctl --socket=HOST:PORT --tls_ca=CA --tls_cert=C --tls_key=K status
//     (the daemon's --listen_tcp with TLS; mutual TLS needs cert and key;
//     the same flags reach a coordinator with TLS)
//   -o json (--output=json) on every command: one line of proto3 JSON (the
//     .proto field names), or JSON lines for watch and a multi-daemon
//     export.
//
// Exit codes: 0 OK (watch: also stopped by a signal or at --for); 1 the
// daemon or coordinator is unreachable, went away, or the call failed; 2
// bad usage.

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cluster_report.h"
#include "client/event_printer.h"
#include "client/event_watch.h"
#include "client/export_driver.h"
#include "client/json_line.h"
#include "client/stop_signals.h"
#include "client/trainer_client.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"
#include "daemon/rpc/tls_config.h"
#include "daemon/rpc/tls_flags.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"
#include "shardd/v1/trainer.pb.h"

ABSL_FLAG(std::string, socket, "/dev/shm/shardd.sock",
          "the daemon's trainer socket (a path, unix:PATH or host:port)");
ABSL_FLAG(std::string, path, "", "export: absolute target path");
ABSL_FLAG(std::string, layout, "full", "export: full or sharded");
ABSL_FLAG(std::string, output, "text",
          "text, or json: one line of proto3 JSON (field names as in the "
          ".proto files, every field printed, 64-bit integers as strings): "
          "status the daemon's GetStatus reply, memory its memory report, "
          "units the report's units, members the topology, export the "
          "ExportStateResponse (one line per daemon, in --sockets order), "
          "watch one TrainerEvent per line, cluster the ClusterState");
ABSL_FLAG(std::string, o, "", "short for --output");
ABSL_FLAG(int64_t, after, 0,
          "watch: start after this event sequence number (the events the "
          "daemon still holds); 0: a snapshot of the daemon's state first");
ABSL_FLAG(absl::Duration, for, absl::ZeroDuration(),
          "watch: stop after this long (e.g. 30s, 5m); 0: until Ctrl-C or "
          "SIGTERM");
ABSL_FLAG(std::string, coordinator, "",
          "cluster: the coordinator's HOST:PORT (with --tls_* when it "
          "serves TLS)");
ABSL_FLAG(int32_t, decisions, 0,
          "cluster: how many of the coordinator's most recent decisions to "
          "show (0: its default, 100)");
ABSL_FLAG(bool, overwrite, false, "export: replace existing files");
ABSL_FLAG(bool, optimizer_state, false, "export: include optimizer state");
ABSL_FLAG(int64_t, timeout_ms, 5000,
          "deadline of each call (export: of its status queries)");
ABSL_FLAG(std::string, sockets, "",
          "export: every rank's daemon socket, comma-separated; the export "
          "is driven on all of them at once (a FULL export needs every rank)");
ABSL_FLAG(absl::Duration, deadline, absl::ZeroDuration(),
          "export: how long to wait for it (0: 2 min plus the model's bytes "
          "at 20 MB/s)");
ABSL_FLAG(bool, other_ranks_join, false,
          "export: a FULL export of a job with more ranks than --sockets "
          "names goes ahead, the caller making the other ranks' daemons "
          "export at the same time (shardctl export on every node)");

namespace shardd {
namespace {

using client::TrainerClient;

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) {
    return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
  }
  if (bytes >= (int64_t{1} << 20)) {
    return absl::StrFormat("%.2f MiB", bytes / 1048576.0);
  }
  if (bytes >= (int64_t{1} << 10)) {
    return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  }
  return absl::StrFormat("%d B", bytes);
}

std::string Strip(const std::string& name, absl::string_view prefix) {
  absl::string_view view = name;
  absl::ConsumePrefix(&view, prefix);
  return std::string(view);
}

int Fail(const TrainerClient& client, const absl::Status& status) {
  if (TrainerClient::IsDaemonUnreachable(status)) {
    std::fprintf(stderr,
                 "shardctl: no shardd daemon at %s (is it running? --socket "
                 "to point elsewhere)\n",
                 client.target().c_str());
  } else {
    std::fprintf(stderr, "shardctl: %s: %s\n",
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
  }
  return 1;
}

// `message` as one line of proto3 JSON on stdout; false (and a message on
// stderr) when it cannot be converted.
bool PrintJson(const google::protobuf::Message& message) {
  absl::StatusOr<std::string> line = client::JsonLine(message);
  if (!line.ok()) {
    std::fprintf(stderr, "shardctl: %s\n", line.status().ToString().c_str());
    return false;
  }
  std::printf("%s\n", line->c_str());
  return true;
}

// The part of `s` a status-family command prints, as JSON.
bool PrintStatusJson(const std::string& command,
                     const v1::GetStatusResponse& s) {
  if (command == "memory") return PrintJson(s.memory());
  if (command == "members") return PrintJson(s.topology());
  if (command == "units") {
    v1::MemoryReport units;
    *units.mutable_units() = s.memory().units();
    return PrintJson(units);
  }
  return PrintJson(s);
}

void PrintStatus(const v1::GetStatusResponse& s) {
  const v1::Topology& t = s.topology();
  if (s.job_state() == v1::JOB_STATE_FAILED) {
    // Terminal: first, so that nobody reads past it.
    std::printf("job             FAILED: %s\n", s.job_failure().c_str());
  } else {
    std::printf("job             RUNNING\n");
  }
  std::printf("rank            %d\n", s.rank());
  std::printf("registered      %s\n", s.registered() ? "yes" : "no");
  std::printf("epoch           %lld%s\n", static_cast<long long>(s.epoch()),
              s.ready() ? " (ready)" : " (not ready)");
  std::printf("committed step  %lld\n",
              static_cast<long long>(s.committed_step()));
  std::printf(
      "member state    %s\n",
      Strip(v1::MemberState_Name(s.member_state()), "MEMBER_STATE_").c_str());
  std::printf("device          %s\n",
              Strip(v1::DeviceKind_Name(s.device()), "DEVICE_KIND_").c_str());
  std::printf(
      "world size      %d, sharding factor %d (shard index %d, "
      "shard group %d)\n",
      t.world_size(), t.sharding_factor(), t.shard_index(), t.shard_group());
  std::printf(
      "recovery        %s\n",
      Strip(v1::RecoveryPhase_Name(s.recovery_phase()), "RECOVERY_PHASE_")
          .c_str());
  std::printf("gathered units  [%s]\n",
              absl::StrJoin(s.gathered_units(), ", ").c_str());
  std::printf("fingerprint     %016llx\n",
              static_cast<unsigned long long>(s.model_fingerprint()));
  std::printf("version         %s\n", s.version().c_str());
  std::printf("shm leftovers   %s (swept so far: %s)\n",
              Bytes(s.shm_leftover_bytes()).c_str(),
              Bytes(s.shm_swept_bytes()).c_str());
  if (!s.peers().empty()) {
    // The Peer services this daemon probes: a partition shows here first.
    std::printf("\n%-5s %-24s %8s %8s %-12s %s\n", "peer", "address",
                "answered", "failing", "state", "last error");
    for (const v1::PeerReachabilityStatus& p : s.peers()) {
      std::printf(
          "%-5d %-24s %8lld %8d %-12s %s\n", p.rank(), p.peer_address().c_str(),
          static_cast<long long>(p.probes_answered()), p.consecutive_failures(),
          p.reported_unreachable()       ? "UNREACHABLE"
          : p.consecutive_failures() > 0 ? "failing"
                                         : "reachable",
          p.last_error().c_str());
    }
  }
  if (!s.collectives().empty()) {
    std::printf("\n%-16s %-8s %8s %8s %12s %12s %10s\n", "collective", "group",
                "calls", "failed", "sent", "received", "seconds");
    int64_t sent = 0;
    for (const v1::CollectiveStats& c : s.collectives()) {
      std::printf(
          "%-16s %-8s %8lld %8lld %12s %12s %10.3f\n",
          Strip(v1::CollectiveKind_Name(c.kind()), "COLLECTIVE_KIND_").c_str(),
          Strip(v1::ProcessGroup_Name(c.group()), "PROCESS_GROUP_").c_str(),
          static_cast<long long>(c.calls()),
          static_cast<long long>(c.failures()), Bytes(c.bytes_sent()).c_str(),
          Bytes(c.bytes_received()).c_str(), c.seconds());
      sent += c.bytes_sent();
    }
    std::printf("bytes sent in all: %s (%lld B)%s\n", Bytes(sent).c_str(),
                static_cast<long long>(sent),
                sent == 0 ? " (no collective has run yet)" : "");
  }
}

void PrintUnits(const v1::GetStatusResponse& s) {
  if (!s.registered()) {
    std::printf("no model registered\n");
    return;
  }
  std::printf("%-5s %-20s %12s %12s %12s %12s %8s\n", "unit", "name", "numel",
              "padded", "shard_off", "shard_numel", "padding");
  for (const v1::UnitMemory& u : s.memory().units()) {
    std::printf("%-5d %-20s %12lld %12lld %12lld %12lld %8lld\n", u.unit(),
                u.name().c_str(), static_cast<long long>(u.numel()),
                static_cast<long long>(u.padded_numel()),
                static_cast<long long>(u.shard_offset()),
                static_cast<long long>(u.shard_numel()),
                static_cast<long long>(u.shard_padding()));
  }
}

void PrintMemory(const v1::GetStatusResponse& s) {
  if (!s.registered()) {
    std::printf("no model registered\n");
    return;
  }
  const v1::MemoryBreakdown& p = s.memory().planned();
  const v1::MemoryBreakdown& h = s.memory().held();
  auto row = [&](const char* name, int64_t planned, int64_t held) {
    std::printf("%-28s %14lld %14lld %12s %s\n", name,
                static_cast<long long>(planned), static_cast<long long>(held),
                Bytes(held).c_str(), planned == held ? "" : "  <-- differs");
  };
  std::printf("%-28s %14s %14s\n", "category (bytes)", "planned", "held");
  row("parameter shards", p.parameter_shard_bytes(), h.parameter_shard_bytes());
  row("low-precision parameters", p.low_precision_parameter_bytes(),
      h.low_precision_parameter_bytes());
  row("gradient shards", p.gradient_shard_bytes(), h.gradient_shard_bytes());
  row("optimizer state", p.optimizer_state_bytes(), h.optimizer_state_bytes());
  row("gathered parameters", p.gathered_parameter_bytes(),
      h.gathered_parameter_bytes());
  row("unsharded gradients", p.unsharded_gradient_bytes(),
      h.unsharded_gradient_bytes());
  if (p.comm_scratch_bytes() > 0 || h.comm_scratch_bytes() > 0) {
    row("communicator scratch", p.comm_scratch_bytes(), h.comm_scratch_bytes());
  }
  row("total", p.total_bytes(), h.total_bytes());
  row("  of which padding", p.padding_bytes(), h.padding_bytes());
  row("peak parameter memory", p.peak_parameter_bytes(),
      h.peak_parameter_bytes());
  if (s.memory().device_total_bytes() > 0) {
    // The whole device, contexts and NCCL's own buffers included.
    std::printf("device: %s free of %s\n",
                Bytes(s.memory().device_free_bytes()).c_str(),
                Bytes(s.memory().device_total_bytes()).c_str());
  }
  // The ZeRO formula from the units: sum psi_i / F + max psi_i.
  const int f = std::max(1, s.topology().sharding_factor());
  int64_t sum = 0, max = 0;
  for (const v1::UnitMemory& u : s.memory().units()) {
    const int64_t psi = u.numel() * 4;  // fp32 bytes
    sum += psi;
    max = std::max(max, psi);
  }
  // K gathered slots each sized for the largest unit (fp32, no padding).
  const int64_t k = max > 0 ? p.gathered_parameter_bytes() / max : 0;
  const int64_t formula = sum / f + k * max;
  std::printf(
      "formula (fp32): sum(psi)/F + K*max(psi) = %lld/%d + %lld*%lld = %lld "
      "B; planned peak %lld B (difference %lld B: padding)\n",
      static_cast<long long>(sum), f, static_cast<long long>(k),
      static_cast<long long>(max), static_cast<long long>(formula),
      static_cast<long long>(p.peak_parameter_bytes()),
      static_cast<long long>(p.peak_parameter_bytes() - formula));
}

void PrintMembers(const v1::GetStatusResponse& s) {
  const v1::Topology& t = s.topology();
  if (t.world_size() == 0) {
    std::printf("no topology yet (not registered)\n");
    return;
  }
  const int w = t.world_size();
  const int f = std::max(1, t.sharding_factor());
  std::printf(
      "W = %d ranks in %d shard group(s) of F = %d; each shard held by %d "
      "rank(s)%s\n",
      w, w / f, f, w / f,
      w / f >= 2 ? "" : " (no replica: recovery needs a checkpoint)");
  std::printf("%-6s %-12s %-12s %s\n", "rank", "shard group", "shard index",
              "");
  for (int r = 0; r < w; ++r) {
    std::printf("%-6d %-12d %-12d %s\n", r, r / f, r % f,
                r == s.rank() ? "<- this daemon" : "");
  }
  std::printf(
      "this daemon: %s, epoch %lld, step %lld; shard group ranks "
      "[%s], replica group ranks [%s]\n",
      Strip(v1::MemberState_Name(s.member_state()), "MEMBER_STATE_").c_str(),
      static_cast<long long>(s.epoch()),
      static_cast<long long>(s.committed_step()),
      absl::StrJoin(t.shard_group_ranks(), ", ").c_str(),
      absl::StrJoin(t.replica_group_ranks(), ", ").c_str());
}

// shardctl export: builds the request, checks that a FULL export reaches
// every rank (or the caller says the others join), and drives it on every
// daemon at once with a progress bar (plain lines when stderr is not a
// terminal).
int Export(TrainerClient& first, const client::TrainerClientOptions& options,
           bool json) {
  v1::ExportStateRequest request;
  request.set_path(absl::GetFlag(FLAGS_path));
  const std::string layout = absl::GetFlag(FLAGS_layout);
  if (layout == "full") {
    request.set_layout(v1::EXPORT_LAYOUT_FULL);
  } else if (layout == "sharded") {
    request.set_layout(v1::EXPORT_LAYOUT_SHARDED);
  } else {
    std::fprintf(stderr, "shardctl: --layout must be full or sharded\n");
    return 2;
  }
  if (request.path().empty() || request.path()[0] != '/') {
    std::fprintf(stderr, "shardctl: export needs --path=/absolute/path\n");
    return 2;
  }
  request.set_overwrite(absl::GetFlag(FLAGS_overwrite));
  request.set_include_optimizer_state(absl::GetFlag(FLAGS_optimizer_state));
  const absl::Duration deadline_flag = absl::GetFlag(FLAGS_deadline);
  if (deadline_flag < absl::ZeroDuration()) {
    std::fprintf(stderr, "shardctl: --deadline must be >= 0\n");
    return 2;
  }
  // The daemons: --sockets, else --socket.
  std::vector<std::unique_ptr<TrainerClient>> owned;
  std::vector<TrainerClient*> clients;
  std::vector<std::string> targets;
  const std::string sockets = absl::GetFlag(FLAGS_sockets);
  if (sockets.empty()) {
    clients.push_back(&first);
    targets.push_back(first.target());
  } else {
    for (absl::string_view target :
         absl::StrSplit(sockets, ',', absl::SkipEmpty())) {
      client::TrainerClientOptions o = options;
      o.target = std::string(target);
      auto created = TrainerClient::Create(o);
      if (!created.ok()) {
        std::fprintf(stderr, "shardctl: %s: %s\n", o.target.c_str(),
                     std::string(created.status().message()).c_str());
        return 2;
      }
      clients.push_back(created->get());
      targets.push_back(o.target);
      owned.push_back(std::move(*created));
    }
  }
  // Which ranks they are, and the model's size for the default deadline.
  std::vector<int> ranks;
  v1::GetStatusResponse status;
  for (TrainerClient* c : clients) {
    auto s = c->GetStatus();
    if (!s.ok()) return Fail(*c, s.status());
    if (!s->registered()) {
      std::fprintf(stderr,
                   "shardctl: FAILED_PRECONDITION: %s has no model "
                   "registered: nothing to export\n",
                   c->target().c_str());
      return 1;
    }
    if (std::find(ranks.begin(), ranks.end(), s->topology().rank()) !=
        ranks.end()) {
      std::fprintf(stderr, "shardctl: --sockets names rank %d twice (%s)\n",
                   s->topology().rank(), c->target().c_str());
      return 2;
    }
    ranks.push_back(s->topology().rank());
    status = *s;
  }
  const int world = status.topology().world_size();
  const int f = status.topology().sharding_factor();
  const bool has_rank0 =
      std::find(ranks.begin(), ranks.end(), 0) != ranks.end();
  if (request.layout() == v1::EXPORT_LAYOUT_FULL && f == 1 && !has_rank0) {
    // F = 1: nothing is gathered; rank 0 writes from its own copy.
    std::fprintf(stderr,
                 "shardctl: FAILED_PRECONDITION: a FULL export is written by "
                 "rank 0 (each rank holds the whole model at F = 1): ask rank "
                 "0's daemon\n");
    return 1;
  }
  if (request.layout() == v1::EXPORT_LAYOUT_FULL && f > 1 &&
      static_cast<int>(clients.size()) < world &&
      !absl::GetFlag(FLAGS_other_ranks_join)) {
    std::fprintf(
        stderr,
        "shardctl: FAILED_PRECONDITION: a FULL export is collective: all %d "
        "ranks' daemons must export at the same time, and %zu %s named. "
        "Pass --sockets=<the socket of every rank> to drive them all from "
        "here, or run `shardctl export --other_ranks_join ...` on every "
        "node at once (within the daemons' collective timeout: if a rank "
        "does not join, the export fails on every rank before anything is "
        "gathered, and nobody is reported failed).\n",
        world, clients.size(), clients.size() == 1 ? "is" : "are");
    return 1;
  }
  if (request.layout() == v1::EXPORT_LAYOUT_SHARDED &&
      static_cast<int>(clients.size()) < world) {
    std::fprintf(stderr,
                 "shardctl: note: a SHARDED export writes one file per rank; "
                 "%zu of %d ranks asked here\n",
                 clients.size(), world);
  }
  // The status does not say the optimizer: AdamW's two states at most.
  const int state_kinds = request.include_optimizer_state() ? 2 : 0;
  const absl::Duration wait =
      deadline_flag > absl::ZeroDuration()
          ? deadline_flag
          : client::DefaultExportDeadline(
                client::ExportBytesOf(status, state_kinds));
  const bool tty = isatty(fileno(stderr)) != 0;
  const MonoTime started = MonoNow();
  int last_decile = -1;
  bool bar_open = false;  // A bar drawn on the terminal without its newline.
  auto on_progress = [&](const v1::ExportProgress& p) {
    const absl::Duration elapsed = MonoNow() - started;
    if (tty) {
      std::fprintf(stderr, "\r%s",
                   client::FormatExportProgress(p.bytes_done(), p.bytes_total(),
                                                elapsed, 30)
                       .c_str());
      bar_open = !p.done();
      if (p.done()) std::fprintf(stderr, "\n");
      return;
    }
    const int decile =
        p.bytes_total() > 0
            ? static_cast<int>(10 * p.bytes_done() / p.bytes_total())
            : 0;
    if (decile == last_decile && !p.done()) return;
    last_decile = decile;
    std::fprintf(stderr, "export %s\n",
                 client::FormatExportProgress(p.bytes_done(), p.bytes_total(),
                                              elapsed, 0)
                     .c_str());
  };
  client::ExportDriver driver(clients);
  const std::vector<absl::StatusOr<v1::ExportStateResponse>> results =
      driver.Run(request, started + wait, on_progress);
  if (bar_open) std::fprintf(stderr, "\n");
  int code = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) {
      std::fprintf(stderr, "%s (rank %d): ", targets[i].c_str(), ranks[i]);
      if (absl::IsDeadlineExceeded(results[i].status()) &&
          MonoNow() >= started + wait) {
        std::fprintf(stderr, "shardctl waited %s (--deadline to wait longer); ",
                     absl::FormatDuration(wait).c_str());
      }
      code = Fail(*clients[i], results[i].status());
      continue;
    }
    if (json) {
      if (!PrintJson(*results[i])) code = 1;
      continue;
    }
    std::printf("%s (rank %d): exported step %lld\n", targets[i].c_str(),
                ranks[i], static_cast<long long>(results[i]->step()));
    for (const v1::ExportedFile& f : results[i]->files()) {
      std::printf("  %s  %s  crc32c %08x\n", f.path().c_str(),
                  Bytes(f.bytes()).c_str(), f.crc32c());
    }
  }
  return code;
}

constexpr char kCommands[] = "status|units|memory|members|export|watch|cluster";

bool IsTrainerCommand(const std::string& command) {
  return command == "status" || command == "units" || command == "memory" ||
         command == "members" || command == "export" || command == "watch";
}

// --output, or -o: "text" or "json"; empty after saying what is wrong.
std::string OutputFormat() {
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string o = absl::GetFlag(FLAGS_o);
  if (!o.empty() && output != "text" && o != output) {
    std::fprintf(stderr,
                 "shardctl: -o %s and --output=%s disagree (-o is short for "
                 "--output: give one)\n",
                 o.c_str(), output.c_str());
    return "";
  }
  const std::string chosen = o.empty() ? output : o;
  if (chosen != "text" && chosen != "json") {
    std::fprintf(stderr, "shardctl: --output must be text or json, got '%s'\n",
                 chosen.c_str());
    return "";
  }
  return chosen;
}

// shardctl cluster: the coordinator's GetClusterState.
int Cluster(const rpc::TlsConfig& tls, absl::Duration timeout, bool json) {
  const std::string target = absl::GetFlag(FLAGS_coordinator);
  if (target.empty()) {
    std::fprintf(stderr,
                 "shardctl: cluster needs --coordinator=HOST:PORT (the "
                 "coordinator's --listen address)\n");
    return 2;
  }
  const int32_t decisions = absl::GetFlag(FLAGS_decisions);
  if (decisions < 0) {
    std::fprintf(stderr, "shardctl: --decisions must be >= 0, got %d\n",
                 decisions);
    return 2;
  }
  if (absl::StatusOr<int> exposed = rpc::CheckPlaintextFromFlags(
          "shardctl", tls, {{"--coordinator", target}});
      !exposed.ok()) {
    std::fprintf(stderr, "shardctl: %s\n",
                 std::string(exposed.status().message()).c_str());
    return 2;
  }
  const std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      target, tls.enabled() ? tls.ChannelCredentials()
                            : grpc::InsecureChannelCredentials());
  const std::unique_ptr<v1::Coordinator::Stub> stub =
      v1::Coordinator::NewStub(channel);
  grpc::ClientContext context;
  rpc::SetTimeout(&context, timeout);
  v1::GetClusterStateRequest request;
  request.set_max_decisions(decisions);
  v1::ClusterState state;
  const absl::Status status =
      rpc::FromGrpc(stub->GetClusterState(&context, request, &state));
  if (absl::IsUnavailable(status)) {
    std::fprintf(stderr,
                 "shardctl: no coordinator at %s (is it running? "
                 "--coordinator to point elsewhere): %s\n",
                 target.c_str(), std::string(status.message()).c_str());
    return 1;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "shardctl: %s: %s: %s\n", target.c_str(),
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
    return 1;
  }
  if (json) return PrintJson(state) ? 0 : 1;
  std::fputs(client::ClusterReport(state, absl::Now()).c_str(), stdout);
  return 0;
}

// shardctl watch, once the daemon's client exists: follows its events
// until --for, a signal (`watch` stopped) or the daemon going away.
int Watch(TrainerClient& client, client::EventWatch& watch) {
  const absl::Duration duration = absl::GetFlag(FLAGS_for);
  const MonoTime until = duration > absl::ZeroDuration()
                             ? MonoNow() + duration
                             : MonoTime::InfiniteFuture();
  const client::WatchEnd end =
      watch.Run(client, absl::GetFlag(FLAGS_after), until);
  switch (end.reason) {
    case client::WatchEnd::Reason::kStopped:
    case client::WatchEnd::Reason::kTimeUp:
      return 0;
    case client::WatchEnd::Reason::kNoDaemon:
      std::fprintf(stderr,
                   "shardctl: no shardd daemon at %s (is it running? --socket "
                   "to point elsewhere)\n",
                   client.target().c_str());
      return 1;
    case client::WatchEnd::Reason::kDaemonGone:
      std::fprintf(stderr,
                   "shardctl: the shardd daemon at %s went away after %lld "
                   "event(s) (%s: %s)\n",
                   client.target().c_str(), static_cast<long long>(end.events),
                   absl::StatusCodeToString(end.status.code()).c_str(),
                   std::string(end.status.message()).c_str());
      return 1;
    case client::WatchEnd::Reason::kFailed:
      break;
  }
  std::fprintf(stderr, "shardctl: watch: %s\n", end.status.ToString().c_str());
  return 1;
}

int Run(const std::vector<char*>& args) {
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: shardctl [--socket=PATH] [-o text|json] %s\n",
                 kCommands);
    return 2;
  }
  const std::string command = args[1];
  if (!IsTrainerCommand(command) && command != "cluster") {
    std::fprintf(stderr, "shardctl: unknown command '%s' (commands: %s)\n",
                 command.c_str(), kCommands);
    return 2;
  }
  const std::string output = OutputFormat();
  if (output.empty()) return 2;
  const bool json = output == "json";
  const absl::Duration timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  if (timeout <= absl::ZeroDuration()) {
    std::fprintf(stderr, "shardctl: --timeout_ms must be > 0\n");
    return 2;
  }
  if (command == "watch") {
    if (absl::GetFlag(FLAGS_after) < 0) {
      std::fprintf(stderr, "shardctl: --after must be >= 0, got %lld\n",
                   static_cast<long long>(absl::GetFlag(FLAGS_after)));
      return 2;
    }
    if (absl::GetFlag(FLAGS_for) < absl::ZeroDuration()) {
      std::fprintf(stderr, "shardctl: --for must be >= 0, got %s\n",
                   absl::FormatDuration(absl::GetFlag(FLAGS_for)).c_str());
      return 2;
    }
  }
  // Signals become a clean end of `watch` (StopSignals): installed before
  // TLS and gRPC start any thread, so that none of them takes the signal.
  winsize window{};
  const bool terminal = isatty(fileno(stdout)) != 0;
  if (!terminal || ioctl(fileno(stdout), TIOCGWINSZ, &window) != 0) {
    window.ws_col = 0;
  }
  client::EventPrinter printer(
      stdout, {.format = json ? client::EventPrinter::Format::kJson
                              : client::EventPrinter::Format::kText,
               .terminal = terminal,
               .bar_width = 30,
               .columns = window.ws_col});
  client::EventWatch watch(&printer);
  std::optional<client::StopSignals> signals;
  if (command == "watch") signals.emplace([&watch](int) { watch.Stop(); });

  // TLS for a host:port --socket (the daemon's --listen_tcp with TLS) or
  // --coordinator: the server's CA, and this client's certificate where it
  // requires one.
  absl::StatusOr<rpc::TlsConfig> tls =
      rpc::TlsConfigFromFlags(rpc::TlsRole::kClient, "shardctl");
  if (!tls.ok()) {
    std::fprintf(stderr, "shardctl: %s\n", tls.status().ToString().c_str());
    return 2;
  }
  if (command == "cluster") return Cluster(*tls, timeout, json);

  client::TrainerClientOptions options;
  options.target = absl::GetFlag(FLAGS_socket);
  options.default_timeout = timeout;
  if (tls->enabled()) options.credentials = tls->ChannelCredentials();
  if (absl::StatusOr<int> exposed = rpc::CheckPlaintextFromFlags(
          "shardctl", *tls, {{"--socket", options.target}});
      !exposed.ok()) {
    std::fprintf(stderr, "shardctl: %s\n",
                 std::string(exposed.status().message()).c_str());
    return 2;
  }
  auto created = TrainerClient::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "shardctl: %s\n",
                 std::string(created.status().message()).c_str());
    return 2;
  }
  TrainerClient& client = **created;
  if (command == "export") return Export(client, options, json);
  if (command == "watch") return Watch(client, watch);
  auto status = client.GetStatus();
  if (!status.ok()) return Fail(client, status.status());
  if (json) return PrintStatusJson(command, *status) ? 0 : 1;
  if (command == "status") PrintStatus(*status);
  if (command == "units") PrintUnits(*status);
  if (command == "memory") PrintMemory(*status);
  if (command == "members") PrintMembers(*status);
  return 0;
}

}  // namespace
}  // namespace shardd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "shardctl [--socket=PATH] [-o text|json] "
      "status|units|memory|members|export|watch|cluster");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  return shardd::Run(args);
}
