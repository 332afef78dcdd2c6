#include "client/counter_normal.h"

#include <cmath>
#include <numbers>

namespace shardd::client {

CounterNormal::CounterNormal(std::initializer_list<uint64_t> key) {
  bool first = true;
  for (uint64_t word : key) {
    key_ = first ? Mix(word) : Mix(key_ ^ word);
    first = false;
  }
}

uint64_t CounterNormal::Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double CounterNormal::At(uint64_t index) const {
  constexpr double kTwoToMinus53 = 0x1.0p-53;
  const uint64_t a = Mix(key_ ^ Mix(2 * index));
  const uint64_t b = Mix(key_ ^ Mix(2 * index + 1));
  const double u1 = static_cast<double>((a >> 11) + 1) * kTwoToMinus53;
  const double u2 = static_cast<double>(b >> 11) * kTwoToMinus53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void CounterNormal::Fill(uint64_t first_index, double stddev,
                         absl::Span<float> out) const {
  for (size_t j = 0; j < out.size(); ++j) {
    out[j] = static_cast<float>(stddev * At(first_index + j));
  }
}

}  // namespace shardd::client
