#ifndef SHARDD_DAEMON_STATE_SAFETENSORS_WRITER_H_
#define SHARDD_DAEMON_STATE_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::state {

// One tensor of a safetensors file, as its header describes it.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16".
  std::vector<int64_t> shape;
  int64_t bytes = 0;  // Its data's length in the file.
};

// A file written and renamed into place.
struct WrittenFile {
  std::string path;
  int64_t bytes = 0;
  uint32_t crc32c = 0;  // CRC-32C of the whole file.
};

// Writes one safetensors file as a stream: an 8-byte little-endian header
// length, the JSON header (tensors in the order given, data_offsets
// consecutive from 0, "__metadata__" first, padded with spaces to a
// multiple of 8), then the tensors' bytes, appended piece by piece in the
// header's order. The header is written at Create (every size is known up
// front), so the caller never holds more than the piece it appends.
//
// The file appears atomically: everything goes to `path`.tmp.<pid>, which
// Finish fsyncs and renames over `path`; any error, or destroying the
// writer before Finish succeeded, removes the temporary file, so a failed
// export (disk full, cancelled) leaves no partial file. The CRC-32C of the
// whole file is computed while writing.
//
// Errors name the path: RESOURCE_EXHAUSTED when the file system is full
// (ENOSPC, EDQUOT) or the process's file size limit is reached (EFBIG),
// ALREADY_EXISTS for an existing target without overwrite, otherwise the
// code absl::ErrnoToStatus gives.
//
// Not thread-safe (one writer per file, used by one thread at a time).
class SafetensorsWriter {
 public:
  // Creates the temporary file and writes the prefix and header.
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      std::string path, const std::vector<SafetensorsTensor>& tensors,
      const std::vector<std::pair<std::string, std::string>>& metadata,
      bool overwrite);

  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  // Abandons an unfinished file (removes the temporary file).
  ~SafetensorsWriter();

  // Appends the next `n` bytes of tensor data. FAILED_PRECONDITION past
  // the declared sizes or after an error (the writer is then unusable).
  absl::Status Append(const void* data, int64_t n);

  // Once every tensor's bytes were appended: fsyncs, renames into place
  // and fsyncs the directory. FAILED_PRECONDITION when bytes are missing.
  absl::StatusOr<WrittenFile> Finish();

  // Bytes of the whole file, and written so far (header included).
  int64_t total_bytes() const { return total_bytes_; }
  int64_t written_bytes() const { return written_bytes_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsWriter(std::string path, std::string tmp, int fd,
                    int64_t total_bytes);
  absl::Status Write(const void* data, int64_t n);
  absl::Status Fail(absl::Status status);
  void Abandon();

  const std::string path_;
  const std::string tmp_;
  int fd_;
  const int64_t total_bytes_;
  int64_t written_bytes_ = 0;
  uint32_t crc_ = 0;
  absl::Status error_;
  bool finished_ = false;
};

// The JSON header (without the 8-byte length prefix, padded) that
// SafetensorsWriter writes for `tensors` and `metadata`.
std::string SafetensorsHeader(
    const std::vector<SafetensorsTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace shardd::state

#endif  // SHARDD_DAEMON_STATE_SAFETENSORS_WRITER_H_
