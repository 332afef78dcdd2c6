// Micro-benchmarks of daemon/core on Google Benchmark: how long planning a
// large model takes (the daemon does it at registration) and the throughput
// of the fp32 -> bf16/fp16 conversions that produce gathered copies, and of
// CRC-32C (every FetchShard chunk and checkpoint section is checksummed)
// against memcpy of the same bytes, and of the exact gradient sum of squares
// (GradClipper::Accumulate, on the step's critical path) on every instruction
// set against memcpy of the same 16 Mi floats.
//
//   scripts/bench core_micro [--quick]

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_report.h"
#include "benchmark/benchmark.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/dtype.h"
#include "daemon/core/grad_clip.h"
#include "daemon/core/kernel_dispatch.h"
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

// The gradient of the step profile's NO_SHARD daemon: 16 Mi floats.
constexpr int64_t kGradElements = int64_t{16} << 20;

// kind 0: gradient-like (normal, 1e-3, every 13th element zero); kind 1:
// magnitudes spread over 200 binades (every block takes the binned path).
const std::vector<float>& Gradient(int kind) {
  static const auto* const kInputs = [] {
    auto* inputs = new std::vector<std::vector<float>>(2);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1e-3f);
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-140, 60);
    for (int64_t i = 0; i < kGradElements; ++i) {
      (*inputs)[0].push_back(i % 13 == 0 ? 0.0f : normal(rng));
      (*inputs)[1].push_back(std::ldexp(mantissa(rng), exponent(rng)));
    }
    return inputs;
  }();
  return (*kInputs)[kind];
}

void BM_GradNorm(benchmark::State& state) {
  const auto isa = static_cast<core::KernelIsa>(state.range(0));
  if (!core::KernelIsaSupported(isa)) {
    state.SkipWithError("instruction set not supported by this CPU");
    return;
  }
  const std::vector<float>& grad = Gradient(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    core::GradNormPartial partial;
    const absl::Status s = core::GradClipper::Accumulate(
        grad.data(), static_cast<int64_t>(grad.size()), &partial, isa);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(partial);
  }
  state.SetItemsProcessed(state.iterations() * kGradElements);
  state.SetBytesProcessed(state.iterations() * kGradElements * 4);
}
BENCHMARK(BM_GradNorm)
    ->ArgNames({"isa", "wide"})
    ->Args({static_cast<int>(core::KernelIsa::kBaseline), 0})
    ->Args({static_cast<int>(core::KernelIsa::kAvx2), 0})
    ->Args({static_cast<int>(core::KernelIsa::kAvx512), 0})
    ->Args({static_cast<int>(core::KernelIsa::kAuto), 0})
    ->Args({static_cast<int>(core::KernelIsa::kBaseline), 1})
    ->Args({static_cast<int>(core::KernelIsa::kAuto), 1});

// memcpy of the gradient's bytes, for grad_norm_to_memcpy_ratio.
void BM_GradNormMemcpy(benchmark::State& state) {
  const std::vector<float>& grad = Gradient(0);
  std::vector<float> out(grad.size(), 1.0f);
  for (auto _ : state) {
    std::memcpy(out.data(), grad.data(), grad.size() * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kGradElements);
  state.SetBytesProcessed(state.iterations() * kGradElements * 4);
}
BENCHMARK(BM_GradNormMemcpy);

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
      } else if (absl::StartsWith(name, "BM_GradNorm/")) {
        GradNormRow(name, run.GetAdjustedCPUTime());
      } else if (name == "BM_GradNormMemcpy") {
        memcpy_ns_per_element_ = run.GetAdjustedCPUTime() / kGradElements;
        report_->SetFigure("grad_norm_memcpy_ns_per_element",
                           memcpy_ns_per_element_);
        SetRatio();
      } else if (absl::StartsWith(name, "BM_Memcpy")) {
        report_->SetFigure("memcpy_gb_per_s", bytes_per_second / 1e9);
      } else if (name == "BM_MemoryPlanForRank/units:96") {
        report_->SetFigure("memory_plan_96_units_us", ns / 1e3);
      }
    }
  }

 private:
  // ns per element of each Accumulate row: isa:0 (auto) is the headline,
  // isa:1 (baseline) the scalar reference it replaced. The grad-norm figures
  // use CPU time, not wall time: both sides of the ratio run on one thread,
  // and CPU time leaves out the preemption of a machine shared with builds.
  void GradNormRow(const std::string& name, double ns) {
    const double per_element = ns / kGradElements;
    const auto isa = [&](int i) {
      return absl::StrContains(name, absl::StrCat("isa:", i, "/"));
    };
    const bool wide = absl::EndsWith(name, "wide:1");
    const char* prefix = wide ? "grad_norm_wide" : "grad_norm";
    if (isa(static_cast<int>(core::KernelIsa::kAuto))) {
      report_->SetFigure(absl::StrCat(prefix, "_ns_per_element"), per_element);
      if (!wide) grad_norm_ns_per_element_ = per_element;
    } else if (isa(static_cast<int>(core::KernelIsa::kBaseline))) {
      report_->SetFigure(absl::StrCat(prefix, "_scalar_ns_per_element"),
                         per_element);
    } else if (isa(static_cast<int>(core::KernelIsa::kAvx2))) {
      report_->SetFigure("grad_norm_avx2_ns_per_element", per_element);
    } else if (isa(static_cast<int>(core::KernelIsa::kAvx512))) {
      report_->SetFigure("grad_norm_avx512_ns_per_element", per_element);
    }
    SetRatio();
  }

  void SetRatio() {
    if (grad_norm_ns_per_element_ > 0.0 && memcpy_ns_per_element_ > 0.0) {
      report_->SetFigure("grad_norm_to_memcpy_ratio",
                         grad_norm_ns_per_element_ / memcpy_ns_per_element_);
    }
  }

  BenchReport* report_;
  double grad_norm_ns_per_element_ = 0.0;
  double memcpy_ns_per_element_ = 0.0;
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
