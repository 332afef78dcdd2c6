// bench/adamw: the AdamW shard update in GB/s next to its memory-traffic
// roofline, measured in the same run.
//
// Bytes per element: AdamW reads g, p, m, v and writes p, m, v: 28 bytes of
// fp32. The roofline kernel makes exactly the same reads and writes with
// trivial arithmetic (p += g, m += g, v += g), is compiled with the same
// options and dispatched to the same instruction set, and uses ordinary
// stores like AdamW: the ratio adamw / roofline says how much of the
// achievable traffic the arithmetic costs. memcpy is there for reference,
// counted as bytes read + bytes written (2 x 4 bytes per element; the
// write-allocate read that a cached store causes is not counted, which is why
// memcpy reads lower than the roofline).
//
// Single thread. Buffers are allocated once and pre-faulted (first touch is
// very slow on these VMs). Each size runs the three kernels interleaved, N
// repetitions each; GB/s is from the best repetition (the median is in the
// table too).
#include "daemon/core/adamw.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_report.h"
#include "daemon/core/kernel_dispatch.h"

namespace shardd::bench {
namespace {

using core::KernelIsa;

constexpr double kAdamWBytesPerElement = 28.0;
constexpr double kMemcpyBytesPerElement = 8.0;

// Same treatment as the AdamW kernel: always-inline body, restrict pointers,
// one copy per instruction set, built with the optimizer's copts.
SHARDD_ALWAYS_INLINE void RooflineBody(const float* __restrict g,
                                       float* __restrict p, float* __restrict m,
                                       float* __restrict v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    p[i] += gi;
    m[i] += gi;
    v[i] += gi;
  }
}

__attribute__((noinline)) void RooflineBaseline(const float* __restrict g,
                                                float* __restrict p,
                                                float* __restrict m,
                                                float* __restrict v,
                                                int64_t n) {
  RooflineBody(g, p, m, v, n);
}
__attribute__((noinline)) SHARDD_TARGET_AVX2 void RooflineAvx2(
    const float* __restrict g, float* __restrict p, float* __restrict m,
    float* __restrict v, int64_t n) {
  RooflineBody(g, p, m, v, n);
}
__attribute__((noinline)) SHARDD_TARGET_AVX512 void RooflineAvx512(
    const float* __restrict g, float* __restrict p, float* __restrict m,
    float* __restrict v, int64_t n) {
  RooflineBody(g, p, m, v, n);
}

using RooflineKernel = void (*)(const float* __restrict, float* __restrict,
                                float* __restrict, float* __restrict, int64_t);

RooflineKernel SelectRoofline(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return RooflineAvx512;
    case KernelIsa::kAvx2:
      return RooflineAvx2;
    default:
      return RooflineBaseline;
  }
}

// Tells the compiler that `p` and all memory may be read here, so that
// stores before it cannot be dropped as dead.
inline void Escape(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// A buffer of n floats: 2 MiB aligned, transparent huge pages requested
// (the same for every kernel), and pre-faulted by writing it.
class Buffer {
 public:
  Buffer(int64_t n, float value) : n_(n) {
    const size_t bytes = Bytes();
    data_ = static_cast<float*>(std::aligned_alloc(kAlign, bytes));
    if (data_ == nullptr) {
      std::cerr << "out of memory allocating " << bytes << " bytes\n";
      std::exit(1);
    }
    madvise(data_, bytes, MADV_HUGEPAGE);  // Advisory: failure is fine.
    std::fill(data_, data_ + n, value);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* data() { return data_; }

 private:
  static constexpr size_t kAlign = size_t{2} << 20;
  size_t Bytes() const {
    const size_t raw = static_cast<size_t>(n_) * sizeof(float);
    return (raw + kAlign - 1) / kAlign * kAlign;
  }
  int64_t n_;
  float* data_;
};

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  bool quick = false;
  std::string out;
  KernelIsa isa = KernelIsa::kAuto;
};

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " [--quick] [--out=PATH] [--isa=auto|baseline|avx2|avx512]\n";
  return 2;
}

int Run(const Options& options) {
  absl::StatusOr<core::AdamW> adamw =
      core::AdamW::Create(core::AdamWOptions{}, options.isa);
  if (!adamw.ok()) {
    std::cerr << adamw.status() << "\n";
    return 2;
  }
  const KernelIsa isa = adamw->isa();
  const RooflineKernel roofline = SelectRoofline(isa);

  const int64_t kM = int64_t{1} << 20;
  const std::vector<int64_t> sizes =
      options.quick ? std::vector<int64_t>{16 * kM}
                    : std::vector<int64_t>{1 * kM, 4 * kM, 16 * kM, 64 * kM};
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());

  // Allocated once for the largest size and reused by every size. Values
  // stay normal floats for every repetition (no subnormal slow paths): small
  // gradients, parameters near 1, zero-initialised moments.
  Buffer g(largest, 1e-3f), p(largest, 1.0f), m(largest, 0.0f),
      v(largest, 0.0f), copy(largest, 0.0f);

  BenchReport report("adamw");
  double min_ratio_large = 1e300;
  for (const int64_t n : sizes) {
    // About 0.5 GiB of AdamW traffic per kernel and size (full run), at
    // least 5 repetitions; --quick: 8 repetitions.
    const int reps =
        options.quick
            ? 8
            : static_cast<int>(std::max<int64_t>(5, (int64_t{512} << 20) / n));
    std::vector<double> t_adamw, t_roofline, t_memcpy;
    int64_t step = 0;
    for (int rep = 0; rep < reps + 1; ++rep) {  // Rep 0 warms up.
      auto start = std::chrono::steady_clock::now();
      const absl::Status status = adamw->Update(
          ++step, 1.0f, g.data(), p.data(), m.data(), v.data(), n);
      Escape(p.data());
      const double a = Seconds(std::chrono::steady_clock::now() - start);
      if (!status.ok()) {
        std::cerr << status << "\n";
        return 1;
      }

      start = std::chrono::steady_clock::now();
      roofline(g.data(), p.data(), m.data(), v.data(), n);
      Escape(p.data());
      const double r = Seconds(std::chrono::steady_clock::now() - start);

      start = std::chrono::steady_clock::now();
      std::memcpy(copy.data(), g.data(), static_cast<size_t>(n) * 4);
      Escape(copy.data());
      const double c = Seconds(std::chrono::steady_clock::now() - start);
      if (rep > 0) {
        t_adamw.push_back(a);
        t_roofline.push_back(r);
        t_memcpy.push_back(c);
      }
    }
    const double best_adamw = *std::min_element(t_adamw.begin(), t_adamw.end());
    const double best_roofline =
        *std::min_element(t_roofline.begin(), t_roofline.end());
    const double best_memcpy =
        *std::min_element(t_memcpy.begin(), t_memcpy.end());
    const double bytes = kAdamWBytesPerElement * static_cast<double>(n);
    const double adamw_gbps = bytes / best_adamw / 1e9;
    const double roofline_gbps = bytes / best_roofline / 1e9;
    const double memcpy_gbps =
        kMemcpyBytesPerElement * static_cast<double>(n) / best_memcpy / 1e9;
    const double ratio = adamw_gbps / roofline_gbps;
    const std::string label = absl::StrCat(n / kM, "m");

    report.AddRow({
        {"elements", static_cast<double>(n)},
        {"size", label},
        {"isa", std::string(core::KernelIsaName(isa))},
        {"reps", static_cast<double>(reps)},
        {"adamw_gbps", adamw_gbps},
        {"roofline_gbps", roofline_gbps},
        {"memcpy_gbps", memcpy_gbps},
        {"adamw_to_roofline", ratio},
        {"adamw_ms_best", best_adamw * 1e3},
        {"adamw_ms_median", Median(t_adamw) * 1e3},
        {"roofline_ms_best", best_roofline * 1e3},
        {"roofline_ms_median", Median(t_roofline) * 1e3},
        {"adamw_gelem_per_s", static_cast<double>(n) / best_adamw / 1e9},
    });
    report.SetFigure(absl::StrCat("adamw_gbps_", label), adamw_gbps);
    report.SetFigure(absl::StrCat("roofline_gbps_", label), roofline_gbps);
    report.SetFigure(absl::StrCat("memcpy_gbps_", label), memcpy_gbps);
    if (n >= 16 * kM) min_ratio_large = std::min(min_ratio_large, ratio);
  }
  report.SetFigure("adamw_to_traffic_roofline_ratio", min_ratio_large);

  return report.Publish(options.out, std::cout, std::cerr);
}

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  shardd::bench::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      options.quick = true;
    } else if (absl::StartsWith(arg, "--out=")) {
      options.out = arg.substr(6);
    } else if (absl::StartsWith(arg, "--isa=")) {
      const std::string name = arg.substr(6);
      bool found = false;
      for (auto isa :
           {shardd::core::KernelIsa::kAuto, shardd::core::KernelIsa::kBaseline,
            shardd::core::KernelIsa::kAvx2, shardd::core::KernelIsa::kAvx512}) {
        if (shardd::core::KernelIsaName(isa) == name) {
          options.isa = isa;
          found = true;
        }
      }
      if (!found) return shardd::bench::Usage(argv[0]);
    } else {
      return shardd::bench::Usage(argv[0]);
    }
  }
  return shardd::bench::Run(options);
}
