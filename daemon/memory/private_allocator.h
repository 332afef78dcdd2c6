#ifndef SHARDD_DAEMON_MEMORY_PRIVATE_ALLOCATOR_H_
#define SHARDD_DAEMON_MEMORY_PRIVATE_ALLOCATOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/memory/byte_buffer.h"

namespace shardd::memory {

// A BufferAllocator for the daemon's private state (gradient and optimizer
// shards, and parameter shards no trainer maps): anonymous mappings aligned
// to 2 MiB and advised as transparent huge pages, pre-faulted 64 MiB at a
// time with MADV_POPULATE_WRITE (the mmap lock is released between slices;
// a kernel without it gets one write per page instead). Buffers have no
// name() and are zero-filled.
//
// Why not the shared-memory allocator for these: tmpfs has THP off by
// default, and on virtual machines the first touch of never-used memory
// costs far more per 4 KiB page than per 2 MiB page, so a replacement
// daemon creating GBs of shards at recovery would pay seconds in 4 KiB
// pages. Where THP is unavailable ("never") this is plain anonymous
// memory.
//
// size() is exactly the bytes asked for (what memory accounting counts); the
// mapping is rounded up to 2 MiB, at most 2 MiB - 1 bytes more per buffer.
// Thread-safe.
class PrivateAllocator : public BufferAllocator {
 public:
  absl::StatusOr<std::unique_ptr<ByteBuffer>> Allocate(absl::string_view name,
                                                       int64_t bytes) override;
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_PRIVATE_ALLOCATOR_H_
