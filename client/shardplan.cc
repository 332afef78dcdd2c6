// shardplan: prints how a model would be sharded over W ranks and what
// every rank holds, by category, next to the ZeRO formula
// Σψᵢ/F + maxᵢψᵢ (+ padding). Pure planning: it starts nothing.
//
//   bazel run //client:shardplan -- --world_size=8 --sharding_factor=4
//       --strategy=HYBRID_SHARD --layers=12 --hidden=4096 --dtype=bf16
//
// Memory admission (what shardd's RegisterModel would decide), before a
// job starts: --memory_limit_bytes=N checks every rank's plan against N;
// --local_limits against this machine's limits as a shardd here reads them
// (its memory cgroup, MemAvailable, --shm_dir's free space, with the
// safety margin); --socket=PATH asks the shardd serving PATH
// (Trainer.CheckMemory: its own limits and flags, for its rank or --rank).
// Exit status: 0 fits (or no check asked), 1 does not fit, 2 bad input or
// the daemon could not be asked.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "client/admission_refusal.h"
#include "daemon/core/admission_decision.h"
#include "daemon/core/admission_plan.h"
#include "daemon/core/dtype.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/model_config.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"
#include "daemon/memory/memory_limit_reader.h"
#include "daemon/node/proto_convert.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "shardd/v1/trainer.grpc.pb.h"

ABSL_FLAG(int64_t, world_size, 4, "W: number of ranks");
ABSL_FLAG(std::string, strategy, "HYBRID_SHARD",
          "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
ABSL_FLAG(int64_t, sharding_factor, 2,
          "F: ranks per shard group (0 = the strategy's default)");
ABSL_FLAG(int64_t, layers, 4, "units of the example MLP (one per layer)");
ABSL_FLAG(int64_t, hidden, 1024,
          "width of each layer (weight hidden x hidden)");
ABSL_FLAG(std::string, dtype, "fp32", "parameter dtype: fp32, bf16 or fp16");
ABSL_FLAG(std::string, optimizer, "adamw", "adamw, sgd_momentum or sgd");
ABSL_FLAG(int64_t, prefetch, 1, "units gathered at once (K)");
ABSL_FLAG(int64_t, reducing, 2,
          "units whose reduce-scatter may be in flight at once (G: gradient "
          "slots when F > 1)");
ABSL_FLAG(std::string, alignment, "element",
          "element, block:N (N elements per block) or whole_tensor");
ABSL_FLAG(bool, bias, true, "each layer also has a bias of `hidden`");
ABSL_FLAG(int64_t, memory_limit_bytes, 0,
          "check every rank's plan against this budget (as shardd's "
          "--memory_limit_bytes); 0: no such check");
ABSL_FLAG(bool, local_limits, false,
          "check every rank's plan against this machine's memory limits as "
          "a shardd here would read them");
ABSL_FLAG(std::string, shm_dir, "/dev/shm",
          "with --local_limits: the shm directory whose free space bounds "
          "segments");
ABSL_FLAG(double, memory_limit_fraction, 1.0,
          "with --local_limits: as shardd's --memory_limit_fraction");
ABSL_FLAG(std::string, socket, "",
          "ask the shardd serving this Unix socket whether it would admit "
          "the model (Trainer.CheckMemory)");
ABSL_FLAG(int, rank, -1,
          "with --socket: the rank to plan for (-1: the daemon's)");

namespace shardd {
namespace {

using core::AlignmentMode;
using core::AlignmentSpec;

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) {
    return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
  }
  if (bytes >= (int64_t{1} << 20)) {
    return absl::StrFormat("%.2f MiB", bytes / 1048576.0);
  }
  return absl::StrFormat("%d B", bytes);
}

absl::StatusOr<core::ShardingStrategy> ParseStrategy(absl::string_view name) {
  for (auto s :
       {core::ShardingStrategy::kFullShard,
        core::ShardingStrategy::kShardGradOp, core::ShardingStrategy::kNoShard,
        core::ShardingStrategy::kHybridShard}) {
    if (core::ShardingStrategyName(s) == name) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("strategy: unknown \"", name, "\""));
}

absl::StatusOr<core::OptimizerKind> ParseOptimizer(absl::string_view name) {
  if (name == "adamw") return core::OptimizerKind::kAdamW;
  if (name == "sgd_momentum") return core::OptimizerKind::kSgdMomentum;
  if (name == "sgd") return core::OptimizerKind::kSgd;
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer: unknown \"", name, "\""));
}

absl::StatusOr<AlignmentSpec> ParseAlignment(absl::string_view text) {
  if (text == "element") return AlignmentSpec{AlignmentMode::kElement, 0};
  if (text == "whole_tensor")
    return AlignmentSpec{AlignmentMode::kWholeTensor, 0};
  int64_t block = 0;
  if (text.substr(0, 6) == "block:" &&
      absl::SimpleAtoi(text.substr(6), &block)) {
    return AlignmentSpec{AlignmentMode::kBlock, block};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("alignment: unknown \"", text, "\""));
}

// The model the flags describe, as a daemon would receive it.
core::ModelConfig ModelOf(core::ShardingStrategy strategy, core::DType dtype,
                          core::OptimizerKind optimizer,
                          const AlignmentSpec& alignment) {
  core::ModelConfig model;
  const int64_t hidden = absl::GetFlag(FLAGS_hidden);
  for (int64_t l = 0; l < absl::GetFlag(FLAGS_layers); ++l) {
    core::UnitConfig unit;
    unit.name = absl::StrCat("layer", l);
    unit.alignment = alignment;
    unit.tensors.push_back({{"weight", {hidden, hidden}, dtype}, {}, false});
    if (absl::GetFlag(FLAGS_bias)) {
      unit.tensors.push_back({{"bias", {hidden}, dtype}, {}, false});
    }
    model.units.push_back(std::move(unit));
  }
  model.config.strategy = strategy;
  model.config.sharding_factor = absl::GetFlag(FLAGS_sharding_factor);
  model.config.max_gathered_units = absl::GetFlag(FLAGS_prefetch);
  model.config.max_reducing_units = absl::GetFlag(FLAGS_reducing);
  model.config.reduce_dtype = core::DType::kFloat32;
  if (optimizer == core::OptimizerKind::kAdamW) {
    model.config.optimizer = core::AdamWOptions{};
  } else {
    core::SgdOptions sgd;
    sgd.momentum = optimizer == core::OptimizerKind::kSgdMomentum ? 0.9 : 0.0;
    model.config.optimizer = sgd;
  }
  return model;
}

// Every rank's plan against `limits`; false when one does not fit.
bool CheckRanks(const std::vector<core::UnitLayout>& units,
                const core::ShardPlan& plan, const core::MemoryOptions& options,
                const std::vector<core::MemoryLimit>& limits, double fraction) {
  std::printf("\nAdmission against: %s\n",
              core::DescribeLimits(limits, fraction).c_str());
  std::printf("%-5s %12s %12s  %s\n", "rank", "host", "of it shm", "verdict");
  bool all_fit = true;
  for (int64_t r = 0; r < plan.world_size(); ++r) {
    absl::StatusOr<core::AdmissionPlan> p =
        core::AdmissionPlan::ForEngine(units, plan, r, options, false);
    if (!p.ok()) {
      std::printf("%-5ld %s\n", r, std::string(p.status().message()).c_str());
      all_fit = false;
      continue;
    }
    std::string verdict;
    for (const core::ScopeCheck& check :
         core::CheckScopes(*p, limits, fraction)) {
      if (check.fits()) continue;
      absl::StrAppend(&verdict, verdict.empty() ? "DOES NOT FIT: " : "; ",
                      core::LimitScopeName(check.scope), " needs ",
                      Bytes(check.needed_bytes), ", may use ",
                      Bytes(check.usable_bytes));
    }
    all_fit = all_fit && verdict.empty();
    std::printf("%-5ld %12s %12s  %s\n", r,
                Bytes(core::BytesInScope(*p, core::LimitScope::kHost)).c_str(),
                Bytes(core::BytesInScope(*p, core::LimitScope::kShm)).c_str(),
                verdict.empty() ? "fits" : verdict.c_str());
  }
  return all_fit;
}

// Trainer.CheckMemory of the shardd at `socket`: 0 admitted, 1 refused, 2
// the daemon could not be asked.
int AskDaemon(const std::string& socket, const core::ModelConfig& model) {
  auto stub = v1::Trainer::NewStub(
      grpc::CreateChannel(absl::StrCat("unix:", socket),
                          grpc::experimental::LocalCredentials(UDS)));
  v1::CheckMemoryRequest request;
  *request.mutable_model() = node::ProtoConvert::ModelToProto(model);
  request.set_world_size(static_cast<int>(absl::GetFlag(FLAGS_world_size)));
  if (absl::GetFlag(FLAGS_rank) >= 0) {
    request.set_rank(absl::GetFlag(FLAGS_rank));
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::CheckMemoryResponse reply;
  const grpc::Status status = stub->CheckMemory(&context, request, &reply);
  if (!status.ok()) {
    std::fprintf(stderr, "shardplan: CheckMemory at unix:%s: %s\n",
                 socket.c_str(), status.error_message().c_str());
    return 2;
  }
  std::printf(
      "\nAdmission by the shardd at unix:%s (rank %d of W = %d, "
      "F = %d): %s\n",
      socket.c_str(), reply.rank(), reply.world_size(), reply.sharding_factor(),
      reply.admitted() ? "admitted" : "DOES NOT FIT");
  for (const v1::PlannedMemory& item : reply.plan()) {
    if (item.bytes() == 0) continue;
    std::printf("  %-22s %12s  %s\n", item.category().c_str(),
                Bytes(item.bytes()).c_str(), item.placement().c_str());
  }
  for (const v1::MemoryLimit& limit : reply.limits()) {
    std::printf("  limit: %s %s usable of %s, %s\n", limit.scope().c_str(),
                Bytes(limit.usable_bytes()).c_str(),
                Bytes(limit.available_bytes()).c_str(), limit.source().c_str());
  }
  for (const std::string& problem : reply.unreadable()) {
    std::printf("  unreadable: %s\n", problem.c_str());
  }
  if (!reply.admitted()) {
    std::printf("%s\n",
                client::FormatAdmissionRefusal(reply.refusal()).c_str());
  }
  return reply.admitted() ? 0 : 1;
}

int Run() {
  auto strategy = ParseStrategy(absl::GetFlag(FLAGS_strategy));
  auto dtype = core::ParseDType(absl::GetFlag(FLAGS_dtype));
  auto optimizer = ParseOptimizer(absl::GetFlag(FLAGS_optimizer));
  auto alignment = ParseAlignment(absl::GetFlag(FLAGS_alignment));
  for (const absl::Status& s : {strategy.status(), dtype.status(),
                                optimizer.status(), alignment.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "shardplan: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  auto plan =
      core::ShardPlan::Create(absl::GetFlag(FLAGS_world_size), *strategy,
                              absl::GetFlag(FLAGS_sharding_factor));
  if (!plan.ok()) {
    std::fprintf(stderr, "shardplan: %s\n",
                 std::string(plan.status().message()).c_str());
    return 2;
  }
  const int64_t f = plan->sharding_factor();
  const int64_t hidden = absl::GetFlag(FLAGS_hidden);
  std::vector<core::UnitLayout> units;
  for (int64_t l = 0; l < absl::GetFlag(FLAGS_layers); ++l) {
    core::UnitSpec spec{absl::StrCat("layer", l),
                        {{"weight", {hidden, hidden}, *dtype}}};
    if (absl::GetFlag(FLAGS_bias)) {
      spec.tensors.push_back({"bias", {hidden}, *dtype});
    }
    auto layout = core::UnitLayout::Create(spec, f, *alignment);
    if (!layout.ok()) {
      std::fprintf(stderr, "shardplan: %s\n",
                   std::string(layout.status().message()).c_str());
      return 2;
    }
    units.push_back(*std::move(layout));
  }
  if (units.empty()) {
    std::fprintf(stderr, "shardplan: layers must be >= 1\n");
    return 2;
  }

  std::printf("Plan: W=%ld F=%ld %s, %ld replica(s) of every shard%s\n",
              plan->world_size(), f,
              std::string(core::ShardingStrategyName(plan->strategy())).c_str(),
              plan->num_replicas(),
              plan->has_replica()
                  ? " (a lost rank is rebuilt from a replica)"
                  : " (NO REPLICA: a lost rank needs a checkpoint)");
  std::printf("\n%-6s %-12s %-14s %s\n", "rank", "shard group", "shard index",
              "replica group");
  for (int64_t r = 0; r < plan->world_size(); ++r) {
    auto p = plan->Placement(r);
    std::string replicas;
    for (int64_t peer : p->replica_group_ranks) {
      absl::StrAppend(&replicas, replicas.empty() ? "" : ",", peer);
    }
    std::printf("%-6ld %-12ld %-14ld {%s}\n", r, p->shard_group, p->shard_index,
                replicas.c_str());
  }

  std::printf("\n%-10s %14s %10s %22s\n", "unit", "elements", "padding",
              "shard elements (min..max)");
  int64_t sum_psi = 0, max_psi = 0;
  for (const core::UnitLayout& u : units) {
    int64_t lo = INT64_MAX, hi = 0;
    for (const core::ShardRange& s : u.shards()) {
      lo = std::min(lo, s.stored());
      hi = std::max(hi, s.stored());
    }
    std::printf("%-10s %14ld %10ld %12ld..%ld\n", u.name().c_str(), u.numel(),
                u.padding_elements(), lo, hi);
    sum_psi += u.numel() * core::DTypeSize(u.dtype());
    max_psi = std::max(max_psi, u.numel() * core::DTypeSize(u.dtype()));
  }

  core::MemoryOptions options;
  options.optimizer = *optimizer;
  options.max_gathered_units = absl::GetFlag(FLAGS_prefetch);
  options.max_reducing_units = absl::GetFlag(FLAGS_reducing);
  std::printf("\n%-5s %12s %12s %12s %12s %12s %12s %14s %12s\n", "rank",
              "param shard", "lowp copy", "grad shard", "optimizer", "gathered",
              "grad buffer", "peak params", "total");
  for (int64_t r = 0; r < plan->world_size(); ++r) {
    auto m = core::MemoryPlan::ForRank(units, *plan, r, options);
    if (!m.ok()) {
      std::fprintf(stderr, "shardplan: %s\n",
                   std::string(m.status().message()).c_str());
      return 2;
    }
    std::printf("%-5ld %12s %12s %12s %12s %12s %12s %14s %12s\n", r,
                Bytes(m->parameter_shard_bytes).c_str(),
                Bytes(m->lowp_parameter_shard_bytes).c_str(),
                Bytes(m->gradient_shard_bytes).c_str(),
                Bytes(m->optimizer_state_bytes).c_str(),
                Bytes(m->gathered_parameter_bytes).c_str(),
                Bytes(m->unsharded_gradient_bytes).c_str(),
                Bytes(m->peak_parameter_bytes).c_str(),
                Bytes(m->total_bytes).c_str());
  }
  std::printf(
      "\nZeRO formula (parameters, %s): Σψ/F + maxψ = %s + %s = %s "
      "(+ padding and fp32 master copies as listed)\n",
      std::string(core::DTypeName(*dtype)).c_str(), Bytes(sum_psi / f).c_str(),
      Bytes(max_psi).c_str(), Bytes(sum_psi / f + max_psi).c_str());

  int verdict = 0;
  std::vector<core::MemoryLimit> limits;
  double fraction = 1.0;
  if (absl::GetFlag(FLAGS_local_limits)) {
    fraction = absl::GetFlag(FLAGS_memory_limit_fraction);
    if (!(fraction > 0 && fraction <= 1)) {
      std::fprintf(stderr,
                   "shardplan: --memory_limit_fraction must be in "
                   "(0, 1]\n");
      return 2;
    }
    memory::MemoryLimitOptions local;
    local.shm_dir = absl::GetFlag(FLAGS_shm_dir);
    const memory::LimitReading reading =
        memory::MemoryLimitReader(local).Read();
    for (const std::string& problem : reading.unreadable) {
      std::printf("unreadable: %s\n", problem.c_str());
    }
    limits = reading.limits;
  }
  if (absl::GetFlag(FLAGS_memory_limit_bytes) < 0) {
    std::fprintf(stderr, "shardplan: --memory_limit_bytes must be >= 0\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_memory_limit_bytes) > 0) {
    const int64_t n = absl::GetFlag(FLAGS_memory_limit_bytes);
    limits.push_back(
        core::MemoryLimit{core::LimitScope::kTotal, n, false,
                          absl::StrCat("--memory_limit_bytes=", n)});
  }
  if (!limits.empty() && !CheckRanks(units, *plan, options, limits, fraction)) {
    verdict = 1;
  }
  if (!absl::GetFlag(FLAGS_socket).empty()) {
    const int asked =
        AskDaemon(absl::GetFlag(FLAGS_socket),
                  ModelOf(*strategy, *dtype, *optimizer, *alignment));
    verdict = std::max(verdict, asked);
  }
  return verdict;
}

}  // namespace
}  // namespace shardd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints the shard plan and per-rank memory of an example MLP.");
  absl::ParseCommandLine(argc, argv);
  return shardd::Run();
}
