#ifndef SHARDD_DAEMON_NODE_SHARED_MEMORY_INIT_READER_H_
#define SHARDD_DAEMON_NODE_SHARED_MEMORY_INIT_READER_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/dtype.h"
#include "daemon/core/tensor_init.h"

namespace shardd::node {

// Reads the initial values a trainer left in a shared-memory file (proto
// SharedMemoryRef init) without ever holding them whole: positioned reads
// of at most kWindowBytes at a time into one window buffer (fp32 values go
// straight into the caller's destination), so the daemon's resident memory
// grows by at most one window however large the values are (issue #18). A
// registration checksums the whole range once (ranks agree on a digest,
// never on the values) and then decodes only its own shard's elements.
// Reads rather than mappings: mapping the trainer's pages costs a page
// fault per 4 KiB, which on VMs with shadow paging is the most expensive
// part of a registration.
//
// Stateless; thread-safe. Keeps nothing it is given. A file truncated while
// it is read is FAILED_PRECONDITION.
class SharedMemoryInitReader {
 public:
  // Largest range mapped at a time: the bound on the daemon's extra
  // resident memory while it reads init values (within the host staging
  // every engine plan already counts, core::kStagingBytes).
  static constexpr int64_t kWindowBytes = int64_t{16} << 20;

  // CRC-32C (core/crc32c.h) of the source's byte range, equal to Crc32c of
  // the same bytes sent as InlineValues. `field` names the init in
  // messages ("model.units[0].tensors[1].init.shared_memory"). NOT_FOUND:
  // no such file; INVALID_ARGUMENT: not a regular file, or shorter than
  // byte_offset + byte_length.
  static absl::StatusOr<uint32_t> Checksum(
      const core::SharedMemorySource& source, absl::string_view field);

  // Elements [first_element, first_element + n) of the values, which are
  // encoded as `dtype` (little-endian, row-major), widened to fp32 into
  // out[0, n). INVALID_ARGUMENT for a range outside the source's
  // byte_length; other errors as Checksum.
  static absl::Status Read(const core::SharedMemorySource& source,
                           core::DType dtype, int64_t first_element, int64_t n,
                           float* out, absl::string_view field);

 private:
  // Reads consecutive windows covering [begin, end) of the source's range
  // (offsets relative to byte_offset; every window starts at begin + a
  // multiple of kWindowBytes) into into(length), then calls
  // visit(that, length).
  static absl::Status ReadBytes(
      const core::SharedMemorySource& source, int64_t begin, int64_t end,
      absl::string_view field, const std::function<char*(int64_t length)>& into,
      const std::function<void(const char* bytes, int64_t length)>& visit);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHARED_MEMORY_INIT_READER_H_
