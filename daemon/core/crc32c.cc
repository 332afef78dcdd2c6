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

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const bool hardware = crc32c_internal::HardwareAvailable();
  if (hardware) return crc32c_internal::ExtendHardware(crc, data, n);
  return crc32c_internal::ExtendPortable(crc, data, n);
}

}  // namespace shardd::core
