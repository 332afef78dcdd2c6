// Micro-benchmarks of daemon/core on Google Benchmark: how long planning a
// large model takes (the daemon does it at registration) and the throughput
// of the fp32 -> bf16/fp16 conversions that produce gathered copies, and of
// CRC-32C (every FetchShard chunk and checkpoint section is checksummed)
// against memcpy of the same bytes.
//
//   scripts/bench core_micro [--quick]

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_report.h"
#include "benchmark/benchmark.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/dtype.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"

namespace shardd::bench {
namespace {

using core::AlignmentMode;
using core::AlignmentSpec;

core::UnitSpec TransformerBlock(int64_t hidden, int tensors) {
  core::UnitSpec unit{"block", {}};
  for (int t = 0; t < tensors; ++t) {
    unit.tensors.push_back(core::TensorSpec{absl::StrCat("w", t),
                                            {hidden, t % 2 == 0 ? hidden : 1},
                                            core::DType::kBFloat16});
  }
  return unit;
}

void BM_UnitLayoutCreate(benchmark::State& state) {
  const core::UnitSpec unit = TransformerBlock(4096, state.range(0));
  const AlignmentSpec alignment =
      state.range(1) == 0 ? AlignmentSpec{AlignmentMode::kElement, 0}
                          : AlignmentSpec{AlignmentMode::kBlock, 128};
  for (auto _ : state) {
    auto layout = core::UnitLayout::Create(unit, 8, alignment);
    benchmark::DoNotOptimize(layout);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_UnitLayoutCreate)
    ->ArgNames({"tensors", "block"})
    ->Args({16, 0})
    ->Args({16, 1})
    ->Args({1024, 0})
    ->Args({1024, 1});

void BM_MemoryPlanForRank(benchmark::State& state) {
  std::vector<core::UnitLayout> units;
  for (int u = 0; u < state.range(0); ++u) {
    units.push_back(*core::UnitLayout::Create(TransformerBlock(1024, 8), 8));
  }
  const core::ShardPlan plan =
      *core::ShardPlan::Create(64, core::ShardingStrategy::kHybridShard, 8);
  for (auto _ : state) {
    auto m = core::MemoryPlan::ForRank(units, plan, 13, {});
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_MemoryPlanForRank)->ArgNames({"units"})->Arg(96);

template <uint16_t (*Convert)(float)>
void BM_Convert(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> in(n);
  std::vector<uint16_t> out(n);
  for (int64_t i = 0; i < n; ++i) in[i] = 1.0f / static_cast<float>(i + 1);
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) out[i] = Convert(in[i]);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 6);
}
BENCHMARK(BM_Convert<core::FloatToBFloat16>)
    ->Name("BM_FloatToBFloat16")
    ->ArgNames({"elements"})
    ->Arg(1 << 20);
BENCHMARK(BM_Convert<core::FloatToHalf>)
    ->Name("BM_FloatToHalf")
    ->ArgNames({"elements"})
    ->Arg(1 << 20);

// 4 MiB (the FetchShard chunk), in cache after the first pass.
void BM_Crc32c(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<uint8_t> in(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 131 + 7);
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = core::Crc32cExtend(crc, in.data(), in.size());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(state.iterations() * n);
}
BENCHMARK(BM_Crc32c)->ArgNames({"bytes"})->Arg(4 << 20);

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<uint8_t> in(n, 1), out(n, 0);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), in.size());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n);
}
BENCHMARK(BM_Memcpy)->ArgNames({"bytes"})->Arg(4 << 20);

// Collects every run into a BenchReport as well as printing it.
class ReportCollector : public benchmark::ConsoleReporter {
 public:
  explicit ReportCollector(BenchReport* report) : report_(report) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const double ns = run.GetAdjustedRealTime();
      const auto items = run.counters.find("items_per_second");
      const double items_per_second = items == run.counters.end()
                                          ? 0.0
                                          : static_cast<double>(items->second);
      const auto bytes = run.counters.find("bytes_per_second");
      const double bytes_per_second = bytes == run.counters.end()
                                          ? 0.0
                                          : static_cast<double>(bytes->second);
      report_->AddRow({{"benchmark", run.benchmark_name()},
                       {"iterations", static_cast<double>(run.iterations)},
                       {"real_ns", ns},
                       {"items_per_second", items_per_second},
                       {"bytes_per_second", bytes_per_second}});
      const std::string name = run.benchmark_name();
      if (absl::StartsWith(name, "BM_FloatToBFloat16")) {
        report_->SetFigure("bf16_convert_gelem_per_s", items_per_second / 1e9);
      } else if (absl::StartsWith(name, "BM_FloatToHalf")) {
        report_->SetFigure("fp16_convert_gelem_per_s", items_per_second / 1e9);
      } else if (name == "BM_UnitLayoutCreate/tensors:1024/block:1") {
        report_->SetFigure("layout_1024_tensors_block_us", ns / 1e3);
      } else if (absl::StartsWith(name, "BM_Crc32c")) {
        report_->SetFigure("crc32c_gb_per_s", bytes_per_second / 1e9);
      } else if (absl::StartsWith(name, "BM_Memcpy")) {
        report_->SetFigure("memcpy_gb_per_s", bytes_per_second / 1e9);
      } else if (name == "BM_MemoryPlanForRank/units:96") {
        report_->SetFigure("memory_plan_96_units_us", ns / 1e3);
      }
    }
  }

 private:
  BenchReport* report_;
};

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  std::string out;
  bool quick = false;
  std::vector<char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (absl::StartsWith(arg, "--out=")) {
      out = arg.substr(6);
    } else {
      args.push_back(argv[i]);
    }
  }
  std::string min_time = quick ? "--benchmark_min_time=0.05" : "";
  if (quick) args.push_back(min_time.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  shardd::bench::BenchReport report("core_micro");
  shardd::bench::ReportCollector collector(&report);
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::Shutdown();
  std::printf("\n%s", report.Table().c_str());
  if (!out.empty()) {
    if (absl::Status s = report.WriteJson(out); !s.ok()) {
      std::fprintf(stderr, "core_micro: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}
