#ifndef SHARDD_CLIENT_COUNTER_NORMAL_H_
#define SHARDD_CLIENT_COUNTER_NORMAL_H_

#include <cstdint>
#include <initializer_list>

#include "absl/types/span.h"

namespace shardd::client {

// A counter-based stream of standard normal numbers: element i of the stream
// named by `key` is a pure function of (key, i), so any slice of any stream
// can be produced on any rank, in any order, without generating the elements
// before it. The definition is fixed here, so that it can be reproduced
// outside this code (e.g. in Python, for comparisons with PyTorch):
//
//   mix(z)  = SplitMix64's finaliser of z + 0x9e3779b97f4a7c15:
//               z += 0x9e3779b97f4a7c15
//               z  = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
//               z  = (z ^ (z >> 27)) * 0x94d049bb133111eb
//               z  =  z ^ (z >> 31)                     (mod 2^64)
//   k       = mix(key[0]); then k = mix(k ^ key[j]) for each further word
//   a, b    = mix(k ^ mix(2i)), mix(k ^ mix(2i + 1))
//   u1      = ((a >> 11) + 1) · 2^-53       in (0, 1]
//   u2      =  (b >> 11)      · 2^-53       in [0, 1)
//   z_i     = sqrt(-2 ln u1) · cos(2π u2)   (Box–Muller, in double)
//   Fill    = float(stddev · z_i)           (one rounding to float)
//
// Immutable after construction; thread-safe. Keeps no pointer it is given.
class CounterNormal {
 public:
  explicit CounterNormal(std::initializer_list<uint64_t> key);

  // z_index, in double.
  double At(uint64_t index) const;

  // out[j] = float(stddev · z_{first_index + j}).
  void Fill(uint64_t first_index, double stddev, absl::Span<float> out) const;

  static uint64_t Mix(uint64_t z);

 private:
  uint64_t key_ = 0;
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_COUNTER_NORMAL_H_
