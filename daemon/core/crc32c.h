// CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected, initial value and
// final XOR 0xFFFFFFFF — the checksum of the FetchShard stream, shard
// checkpoints and commit logs (ChecksumAlgorithm CRC32C in common.proto).
//
//   uint32_t crc = Crc32c(data, n);              // crc32c("123456789") ==
//                                                //   0xE3069283
//   crc = Crc32cExtend(Crc32c(a, na), b, nb);    // == Crc32c(a ++ b)
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once, at
// run time; about 3 cycles per 8 bytes), otherwise portable slice-by-8
// tables. Pure functions: thread-safe, no state besides constant tables.

#ifndef SHARDD_DAEMON_CORE_CRC32C_H_
#define SHARDD_DAEMON_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace shardd::core {

// The CRC-32C of (the bytes `crc` is the CRC-32C of) followed by data[0, n).
// crc = 0 starts a new checksum. data may be null when n == 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cExtend(0, data, n);
}

namespace crc32c_internal {

// The two implementations behind Crc32cExtend, exposed for tests.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);
// True when ExtendHardware may be called on this CPU.
bool HardwareAvailable();
// Only when HardwareAvailable().
uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n);

}  // namespace crc32c_internal
}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_CRC32C_H_
