#include "bench/collectives_options.h"

#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace shardd::bench::collectives {

[[noreturn]] void Die(absl::string_view message) {
  std::cerr << "bench/collectives: " << message << std::endl;
  std::exit(1);
}

void Check(const absl::Status& status, absl::string_view what) {
  if (!status.ok()) Die(absl::StrCat(what, ": ", status.ToString()));
}

std::vector<int64_t> Sizes(bool quick, int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t s = quick ? kMiB : 4 * kKiB;
       s <= (quick ? 16 * kMiB : 256 * kMiB); s *= 4) {
    if (s >= min_bytes && (max_bytes == 0 || s <= max_bytes)) {
      sizes.push_back(s);
    }
  }
  return sizes;
}

int Reps(int64_t bytes) {
  if (bytes <= 4 * kMiB) return 24;
  if (bytes <= 64 * kMiB) return 12;
  return 6;
}

int MaxReps(int64_t bytes) {
  if (bytes <= 4 * kMiB) return 300;
  if (bytes <= 16 * kMiB) return 120;
  if (bytes <= 64 * kMiB) return 36;
  return 12;
}

}  // namespace shardd::bench::collectives
