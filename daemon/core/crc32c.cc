#include "daemon/core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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

bool FoldingAvailable() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0 &&
           __builtin_cpu_supports("pclmul") != 0 &&
           __builtin_cpu_supports("avx512f") != 0 &&
           __builtin_cpu_supports("vpclmulqdq") != 0;
  }();
  return available;
}

namespace {

// Folding a 128-bit lane forward by D bits (it stands D bits before the
// lane it is added to) multiplies its low qword (the earlier bytes) by
// x^(D+32) and its high qword by x^(D-32) modulo the polynomial, in the
// reflected representation shifted left by one (Intel, "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ", 2009; the same
// constants as Linux's crc32-pclmul for the gzip polynomial).
constexpr uint64_t FoldConstant(uint64_t bits) {
  return static_cast<uint64_t>(X2nModP(bits, 0)) << 1;
}

struct FoldPair {
  uint64_t low;   // x^(D+32)
  uint64_t high;  // x^(D-32)
};

constexpr FoldPair Fold(uint64_t d) {
  return FoldPair{FoldConstant(d + 32), FoldConstant(d - 32)};
}

constexpr FoldPair kFold128 = Fold(128);
constexpr FoldPair kFold256 = Fold(256);
constexpr FoldPair kFold384 = Fold(384);
constexpr FoldPair kFold512 = Fold(512);
constexpr FoldPair kFold1024 = Fold(1024);
constexpr FoldPair kFold1536 = Fold(1536);
constexpr FoldPair kFold2048 = Fold(2048);

__attribute__((target("avx512f,vpclmulqdq"))) inline __m512i Broadcast(
    FoldPair k) {
  return _mm512_set_epi64(
      static_cast<int64_t>(k.high), static_cast<int64_t>(k.low),
      static_cast<int64_t>(k.high), static_cast<int64_t>(k.low),
      static_cast<int64_t>(k.high), static_cast<int64_t>(k.low),
      static_cast<int64_t>(k.high), static_cast<int64_t>(k.low));
}

// 128-bit lane I of x. (The zeroing form: GCC 12's plain
// _mm512_extracti32x4_epi32 trips -Wmaybe-uninitialized in its own header.)
template <int I>
__attribute__((target("avx512f"))) inline __m128i Lane(__m512i x) {
  return _mm512_maskz_extracti32x4_epi32(static_cast<__mmask8>(0xF), x, I);
}

// Every 128-bit lane of x folded forward by k's distance, plus `onto`.
__attribute__((target("avx512f,vpclmulqdq"))) inline __m512i Fold512(
    __m512i x, __m512i k, __m512i onto) {
  const __m512i lo = _mm512_clmulepi64_epi128(x, k, 0x00);
  const __m512i hi = _mm512_clmulepi64_epi128(x, k, 0x11);
  return _mm512_ternarylogic_epi64(lo, hi, onto, 0x96);  // lo ^ hi ^ onto
}

__attribute__((target("sse4.2,pclmul"))) inline __m128i Fold128(__m128i x,
                                                                FoldPair k,
                                                                __m128i onto) {
  const __m128i kk =
      _mm_set_epi64x(static_cast<int64_t>(k.high), static_cast<int64_t>(k.low));
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00),
                                     _mm_clmulepi64_si128(x, kk, 0x11)),
                       onto);
}

}  // namespace

__attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq"))) uint32_t
ExtendFolding(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (n < 256) return ExtendHardware(crc, data, n);
  // The CRC register is folded into the first bytes (the CRC of M from
  // register c equals the CRC from 0 of M with c xor-ed into its first 4
  // bytes); then four 512-bit accumulators, 256 bytes a step, each lane
  // folded forward by 2048 bits onto the next bytes.
  __m512i x0 = _mm512_loadu_si512(p);
  __m512i x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128);
  __m512i x3 = _mm512_loadu_si512(p + 192);
  x0 = _mm512_xor_si512(
      x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  p += 256;
  n -= 256;
  const __m512i k2048 = Broadcast(kFold2048);
  while (n >= 256) {
    x0 = Fold512(x0, k2048, _mm512_loadu_si512(p));
    x1 = Fold512(x1, k2048, _mm512_loadu_si512(p + 64));
    x2 = Fold512(x2, k2048, _mm512_loadu_si512(p + 128));
    x3 = Fold512(x3, k2048, _mm512_loadu_si512(p + 192));
    p += 256;
    n -= 256;
  }
  // Onto x3: x0 stands 1536 bits before it, x1 1024, x2 512.
  x3 = Fold512(x0, Broadcast(kFold1536), x3);
  x3 = Fold512(x1, Broadcast(kFold1024), x3);
  x3 = Fold512(x2, Broadcast(kFold512), x3);
  // Its four lanes onto the last one.
  __m128i a = Lane<3>(x3);
  a = Fold128(Lane<0>(x3), kFold384, a);
  a = Fold128(Lane<1>(x3), kFold256, a);
  a = Fold128(Lane<2>(x3), kFold128, a);
  while (n >= 16) {
    a = Fold128(a, kFold128,
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    p += 16;
    n -= 16;
  }
  // The 16 folded bytes are a message whose CRC from register 0 is the
  // register after everything so far; the tail continues from it.
  uint64_t c = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(a)));
  c = _mm_crc32_u64(c, static_cast<uint64_t>(_mm_extract_epi64(a, 1)));
  return ExtendHardware(~static_cast<uint32_t>(c), p, n);
}

#else

bool HardwareAvailable() { return false; }
bool FoldingAvailable() { return false; }

uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n) {
  return ExtendPortable(crc, data, n);
}
uint32_t ExtendFolding(uint32_t crc, const void* data, size_t n) {
  return ExtendPortable(crc, data, n);
}

#endif

}  // namespace crc32c_internal

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return crc32c_internal::MultModP(crc32c_internal::X2nModP(len_b, 3), crc_a) ^
         crc_b;
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const bool folding = crc32c_internal::FoldingAvailable();
  static const bool hardware = crc32c_internal::HardwareAvailable();
  if (folding) return crc32c_internal::ExtendFolding(crc, data, n);
  if (hardware) return crc32c_internal::ExtendHardware(crc, data, n);
  return crc32c_internal::ExtendPortable(crc, data, n);
}

}  // namespace shardd::core
