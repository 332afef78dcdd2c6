// shardplan: prints how a model would be sharded over W ranks and what
// every rank holds, by category, next to the ZeRO formula
// Σψᵢ/F + maxᵢψᵢ (+ padding). Pure planning: it starts nothing.
//
//   bazel run //client:shardplan -- --world_size=8 --sharding_factor=4
//       --strategy=HYBRID_SHARD --layers=12 --hidden=4096 --dtype=bf16

#include <algorithm>
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
#include "daemon/core/dtype.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"

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
ABSL_FLAG(std::string, alignment, "element",
          "element, block:N (N elements per block) or whole_tensor");

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
    core::UnitSpec spec{
        absl::StrCat("layer", l),
        {{"weight", {hidden, hidden}, *dtype}, {"bias", {hidden}, *dtype}}};
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
  return 0;
}

}  // namespace
}  // namespace shardd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints the shard plan and per-rank memory of an example MLP.");
  absl::ParseCommandLine(argc, argv);
  return shardd::Run();
}
