// CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected, initial value and
// final XOR 0xFFFFFFFF — the checksum of the FetchShard stream, shard
// checkpoints and commit logs (ChecksumAlgorithm CRC32C in common.proto).
//
//   uint32_t crc = Crc32c(data, n);              // crc32c("123456789") ==
//                                                //   0xE3069283
//   crc = Crc32cExtend(Crc32c(a, na), b, nb);    // == Crc32c(a ++ b)
//   crc = Crc32cCombine(Crc32c(a, na), Crc32c(b, nb), nb);  // the same,
//                                                // without reading a or b
//
// Three implementations, chosen once at run time by what the CPU has:
//  * AVX-512 with VPCLMULQDQ: carry-less multiplication folds four 512-bit
//    accumulators forward over 256 bytes a step (Intel's PCLMULQDQ folding,
//    16 lanes at once), then the crc32 instruction reduces the last 16
//    bytes (about 3x the next one on the machines here);
//  * SSE4.2: the crc32 instruction on three independent streams at once for
//    blocks of 3 x 4 KiB (it has a latency of 3 cycles and a throughput of
//    1, so one dependent chain uses a third of it), merged by polynomial
//    shifts;
//  * otherwise portable slice-by-8 tables.
// Pure functions: thread-safe, no state besides constant tables.

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

// The CRC-32C of A ++ B from crc_a = CRC-32C(A), crc_b = CRC-32C(B) and
// len_b = |B| (zlib's crc32_combine for this polynomial; O(log len_b)).
// Lets a stream keep a whole-payload checksum from its per-chunk ones
// without a second pass over the bytes.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

namespace crc32c_internal {

// The two implementations behind Crc32cExtend, exposed for tests.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);
// True when ExtendHardware may be called on this CPU.
bool HardwareAvailable();
// Only when HardwareAvailable().
uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n);
// True when ExtendFolding may be called (AVX-512 with VPCLMULQDQ).
bool FoldingAvailable();
// Only when FoldingAvailable(): carry-less-multiply folding of 256 bytes a
// step (buffers under 256 bytes go to ExtendHardware).
uint32_t ExtendFolding(uint32_t crc, const void* data, size_t n);

}  // namespace crc32c_internal
}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_CRC32C_H_
