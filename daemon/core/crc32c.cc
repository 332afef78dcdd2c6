#include "daemon/core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace shardd::core {
namespace crc32c_internal {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// kTables[0] is the byte-wise table; kTables[k][b] is the CRC of byte b
// followed by k zero bytes (slice-by-8).
constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolyReflected : 0u);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) {
      const uint32_t prev = t[k - 1][b];
      t[k][b] = (prev >> 8) ^ t[0][prev & 0xffu];
    }
  }
  return t;
}

constexpr Tables kTables = MakeTables();

// a * b modulo the polynomial, both in the reflected representation (bit 31
// is x^0), as in zlib's multmodp.
constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31;
  uint32_t p = 0;
  while (true) {
    if ((a & m) != 0) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1u) != 0 ? (b >> 1) ^ kPolyReflected : b >> 1;
  }
  return p;
}

using PowerTable = std::array<uint32_t, 32>;

// kX2n[k] = x^(2^k) modulo the polynomial.
constexpr PowerTable MakeX2n() {
  PowerTable t{};
  uint32_t p = 1u << 30;  // x^1
  t[0] = p;
  for (int k = 1; k < 32; ++k) t[k] = p = MultModP(p, p);
  return t;
}

constexpr PowerTable kX2n = MakeX2n();

// x^(n * 2^k) modulo the polynomial.
constexpr uint32_t X2nModP(uint64_t n, unsigned k) {
  uint32_t p = 1u << 31;  // x^0
  while (n != 0) {
    if ((n & 1u) != 0) p = MultModP(kX2n[k & 31], p);
    n >>= 1;
    ++k;
  }
  return p;
}

// The hardware path's interleaved block: three streams of kStripe bytes.
constexpr size_t kStripe = 4096;
// Shifting a CRC register over kStripe zero bytes.
constexpr uint32_t kShiftStripe = X2nModP(kStripe, 3);

inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint64_t v = LoadLe64(p) ^ c;
    c = kTables[7][v & 0xff] ^ kTables[6][(v >> 8) & 0xff] ^
        kTables[5][(v >> 16) & 0xff] ^ kTables[4][(v >> 24) & 0xff] ^
        kTables[3][(v >> 32) & 0xff] ^ kTables[2][(v >> 40) & 0xff] ^
        kTables[1][(v >> 48) & 0xff] ^ kTables[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xffu];
    ++p;
    --n;
  }
  return ~c;
}

#if defined(__x86_64__)

bool HardwareAvailable() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return available;
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc,
                                                          const void* data,
                                                          size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t c = static_cast<uint32_t>(~crc);
  // Bytes up to an 8-byte boundary, then 8 bytes at a time, then the tail.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
    ++p;
    --n;
  }
  // Three independent chains over consecutive stripes, merged by linearity:
  // the register after A ++ B ++ C is
  //   R(c, A) * x^(16 K) + R(0, B) * x^(8 K) + R(0, C)   (K = kStripe bits/8).
  while (n >= 3 * kStripe) {
    uint64_t a = c, b = 0, d = 0;
    const uint8_t* pb = p + kStripe;
    const uint8_t* pd = p + 2 * kStripe;
    for (size_t i = 0; i < kStripe; i += 8) {
      uint64_t va, vb, vd;
      std::memcpy(&va, p + i, 8);
      std::memcpy(&vb, pb + i, 8);
      std::memcpy(&vd, pd + i, 8);
      a = _mm_crc32_u64(a, va);
      b = _mm_crc32_u64(b, vb);
      d = _mm_crc32_u64(d, vd);
    }
    const uint32_t ab = MultModP(kShiftStripe, static_cast<uint32_t>(a)) ^
                        static_cast<uint32_t>(b);
    c = MultModP(kShiftStripe, ab) ^ static_cast<uint32_t>(d);
    p += 3 * kStripe;
    n -= 3 * kStripe;
  }
  while (n >= 32) {
    uint64_t v[4];
    std::memcpy(v, p, sizeof(v));
    c = _mm_crc32_u64(c, v[0]);
    c = _mm_crc32_u64(c, v[1]);
    c = _mm_crc32_u64(c, v[2]);
    c = _mm_crc32_u64(c, v[3]);
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
    ++p;
    --n;
  }
  return ~static_cast<uint32_t>(c);
}

#else

bool HardwareAvailable() { return false; }

uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n) {
  return ExtendPortable(crc, data, n);
}

#endif

}  // namespace crc32c_internal

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return crc32c_internal::MultModP(crc32c_internal::X2nModP(len_b, 3), crc_a) ^
         crc_b;
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const bool hardware = crc32c_internal::HardwareAvailable();
  if (hardware) return crc32c_internal::ExtendHardware(crc, data, n);
  return crc32c_internal::ExtendPortable(crc, data, n);
}

}  // namespace shardd::core
