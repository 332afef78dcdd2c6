// Sharded checkpoints: each daemon periodically writes its own shard (the
// same sections the FetchShard stream sends) to a file, the fallback when a
// shard has no live replica (W/F = 1). Restoring reads the file back into
// buffers the caller provides, verifying every byte.
//
// Layout: DIR/rank-<R>/step-<N>.shardckpt, written as a temporary file
// (".step-<N>.shardckpt.tmp.<pid>") in the same directory, fsynced, renamed
// and the directory fsynced, so a file with the final name is always
// complete. Format (integers little-endian):
//
//   "SHRDCKP1"                    8-byte magic
//   u64 header_length
//   v1::ShardHeader               serialized: step, shard_index, model,
//                                 fingerprint, sections with stream_offset,
//                                 total_bytes, checksum = CRC32C
//   payload                       the sections back to back (total_bytes)
//   u32 CRC-32C per section       in section order
//   u32 CRC-32C of the payload    (= the FetchShard trailer's CRC)
//   u32 CRC-32C of the first three parts (magic, length, header bytes)
//   "SHRDEND1"                    8-byte magic
//
//   auto path = WriteShardCheckpoint("/ckpt", rank, header, sources, 2);
//   auto latest = LatestShardCheckpoint("/ckpt", rank);
//   RETURN_IF_ERROR(ReadShardCheckpoint(*latest, dest, &header, &crc));
//
// Thread-safety: the functions share no state; at most one writer per
// (DIR, rank) at a time.

#ifndef SHARDD_DAEMON_RECOVERY_SHARD_CHECKPOINT_H_
#define SHARDD_DAEMON_RECOVERY_SHARD_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/recovery/shard_memory.h"
#include "daemon/recovery/shard_stream.h"
#include "shardd/v1/peer.pb.h"

namespace shardd::recovery {

// "DIR/rank-R/step-N.shardckpt".
std::string ShardCheckpointPath(const std::string& dir, int rank, int64_t step);

// Writes the checkpoint of header.step() for `rank` and returns its path.
// Sets header's sections (from sources, with stream offsets), total_bytes
// and checksum, as ShardStreamWriter does. Creates DIR and DIR/rank-R as
// needed. Fires SHARDD_FAILPOINT("checkpoint.write.mid") after half of the
// payload is in the temporary file. With keep_last >= 1, after a successful
// write the new file is the rank's latest: files of the rank with a higher
// step (an abandoned timeline after a rollback) are deleted, of the lower
// ones the newest keep_last - 1 kept, and the one of `keep_step` (the
// newest step every rank holds: what a rollback would need), and temporary
// files of other processes (killed writers) removed; deletion is best
// effort. keep_last <= 0 deletes nothing.
// INVALID_ARGUMENT for rank < 0, step < 0 or bad sources; otherwise the
// errno's code with a message naming the path (nothing is left behind but
// possibly the temporary file of a failed write).
// The sources' bytes are read through `memory`.
absl::StatusOr<std::string> WriteShardCheckpoint(
    const std::string& dir, int rank, v1::ShardHeader header,
    const std::vector<SectionSource>& sources, int keep_last,
    const ShardMemory& memory = ShardMemory::Host(), int64_t keep_step = -1);

// The steps of the rank's checkpoint files, ascending (temporary and other
// files ignored). NOT_FOUND "no checkpoint for rank R in DIR/rank-R" when
// the directory is missing or holds none.
absl::StatusOr<std::vector<int64_t>> ListShardCheckpoints(
    const std::string& dir, int rank);

// The path of the rank's checkpoint with the highest step; NOT_FOUND as
// ListShardCheckpoints. Does not read the file.
absl::StatusOr<std::string> LatestShardCheckpoint(const std::string& dir,
                                                  int rank);

// Removes the rank's checkpoint temporaries whose writer is dead (a writer
// holds an flock on its temporary until the rename; the kernel releases it
// when the writer dies) and returns "PATH (N bytes)" for each. A temporary is
// never read as a checkpoint anyway; this frees its space.
absl::StatusOr<std::vector<std::string>> RemoveDeadCheckpointTemporaries(
    const std::string& dir, int rank);

// Removes the rank's checkpoint files of steps above `step`: a rollback to
// `step` abandons the timeline they belong to, and a verified checkpoint
// must only ever prove a step the job still stands behind. OK when the
// folder does not exist; the errno's code naming the path otherwise.
absl::Status RemoveShardCheckpointsAbove(const std::string& dir, int rank,
                                         int64_t step);

// Reads and checks the header: magics, lengths, the header's CRC, the
// section layout, the file size and (for a "step-N.shardckpt" name) that N
// is the header's step. NOT_FOUND for a missing file; DATA_LOSS naming the
// path otherwise, "PATH: truncated (expected N bytes, found M)" for a short
// file.
absl::StatusOr<v1::ShardHeader> ReadShardCheckpointHeader(
    const std::string& path);

// Reads the whole checkpoint: checks the header as above, calls dest once
// per section (as ShardStreamAssembler does) and reads the section's bytes
// there, then verifies every section's CRC and the payload's CRC. DATA_LOSS
// "PATH: section S (unit U kind K): crc32c mismatch ..." for corruption;
// dest's error unchanged. On any error the destination bytes are garbage.
// header_out and payload_crc_out (the CRC-32C of the whole payload, for
// the commit log) may be null.
// The destinations are written through `memory`.
absl::Status ReadShardCheckpoint(
    const std::string& path, const ShardStreamAssembler::Destination& dest,
    v1::ShardHeader* header_out, uint32_t* payload_crc_out = nullptr,
    const ShardMemory& memory = ShardMemory::Host());

// Checks a whole checkpoint without keeping it: the header as
// ReadShardCheckpointHeader, then every section's and the payload's CRC,
// reading through ReadShardCheckpoint's bounded buffer (4 MiB). Returns the
// header. Errors as ReadShardCheckpoint (DATA_LOSS naming the path and the
// section).
absl::StatusOr<v1::ShardHeader> VerifyShardCheckpoint(const std::string& path);

}  // namespace shardd::recovery

#endif  // SHARDD_DAEMON_RECOVERY_SHARD_CHECKPOINT_H_
