#ifndef SHARDD_BENCH_COLLECTIVES_OPTIONS_H_
#define SHARDD_BENCH_COLLECTIVES_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

// What bench/collectives' parent and its workers share: the options, the
// sizes and repetitions of every point, and how a worker dies.
namespace shardd::bench::collectives {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

struct Options {
  bool quick = false;
  std::string out;
  // Worker mode.
  bool worker = false;
  int rank = -1;
  int size = 0;
  std::string store;
  bool fsdp = false;
  // Raw Gloo only (no GlooCollective): a baseline of the machine.
  bool raw_only = false;
  // Calibration: ours' side runs raw Gloo too, on a context of its own set
  // up as ours is, so that every ratio of ours becomes a second A/A
  // control: what the bar reads for code identical to Gloo's (how often
  // it fails by chance).
  bool gloo_as_ours = false;
  // Only these operations / world sizes (empty: all), for looking into one
  // point without the whole run.
  std::vector<std::string> ops;
  std::vector<int> worlds;
  int64_t min_bytes = 0;
  int64_t max_bytes = 0;  // 0: no bound.
  // Per W, no new round of blocks starts once this much time has passed
  // (every point has run one block by then); 0: none. --quick: kQuickBudget.
  absl::Duration budget = absl::ZeroDuration();
};

// --quick's time per W for the points after their first block.
constexpr absl::Duration kQuickBudget = absl::Seconds(15);

[[noreturn]] void Die(absl::string_view message);

void Check(const absl::Status& status, absl::string_view what);

// 4 KiB .. 256 MiB in powers of 4 (--quick: 1 .. 16 MiB, where the bar
// looks), within [min, max] (0: no bound).
std::vector<int64_t> Sizes(bool quick, int64_t min_bytes, int64_t max_bytes);

// Repetitions per block of one point (after warm-up), the same in both
// modes (--quick once took 8-16 per block where the full run took 30-60,
// and had other medians): small enough that one round over every point of
// a W stays within seconds, so that rounds interleave finely and --quick's
// budget leaves each point a few of them. BalancedOrder continues across a
// point's blocks (it counts the point's repetitions), so the block size
// does not unbalance the order.
int Reps(int64_t bytes);

// The most repetitions one point may take while its paired ratio is still
// uncertain (cheap sizes can afford many).
int MaxReps(int64_t bytes);

// Target precision of a point's paired ratio: +-0.05 at 95%.
constexpr double kHalfWidth = 0.05;

}  // namespace shardd::bench::collectives

#endif  // SHARDD_BENCH_COLLECTIVES_OPTIONS_H_
