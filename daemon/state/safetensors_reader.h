#ifndef SHARDD_DAEMON_STATE_SAFETENSORS_READER_H_
#define SHARDD_DAEMON_STATE_SAFETENSORS_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::state {

// One tensor of a safetensors file, as its header describes it.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // As written: "F32", "BF16", "F16", "F64", "I64", ...
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t element_bytes = 0;
  // Absolute byte range [begin, end) of the tensor's data in the file.
  int64_t begin = 0;
  int64_t end = 0;
};

// Reads a safetensors file (https://github.com/huggingface/safetensors): an
// 8-byte little-endian header length N, N bytes of JSON header
// ({"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets"}}),
// then the tensors' bytes. Open validates the whole header against the file
// size (lengths, dtypes, shapes, offsets inside the data area, byte counts
// matching shape x dtype, no two tensors overlapping); ReadFloats then reads
// any element range of a tensor with positioned reads (pread), so a daemon
// reads only its shard of a file that may be on shared storage, converting
// F32, BF16, F16 and F64 to fp32.
//
// Errors name the file (and the tensor): DATA_LOSS for a corrupt or
// truncated file, NOT_FOUND for a missing file or tensor, INVALID_ARGUMENT
// for a tensor whose shape or dtype the caller cannot use.
//
// Move-only; owns the file descriptor. ReadFloats is const and uses only
// pread, so concurrent reads from several threads are safe.
class SafetensorsReader {
 public:
  // The header may be at most this long (the reference implementation's
  // limit is 100 MB).
  static constexpr int64_t kMaxHeaderBytes = 100 << 20;

  static absl::StatusOr<SafetensorsReader> Open(const std::string& path);

  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  int64_t file_bytes() const { return file_bytes_; }
  // CRC-32C of the JSON header's bytes: with file_bytes(), what tells two
  // files apart without reading their data (our exports' headers name the
  // step and the layout).
  uint32_t header_crc32c() const { return header_crc32c_; }

  // A fingerprint of the file without reading all of it: its size, its
  // header's CRC-32C and the CRC-32C of kFingerprintSamples blocks of
  // kFingerprintBlockBytes spread evenly over the data (the first and the
  // last included). Two files with the same header and different values
  // (two fine-tunes of one architecture) differ in it unless every sampled
  // block is equal; ranks compare it before loading (ModelAgreement
  // .state_source), reading at most 256 KiB each. DATA_LOSS or the read's
  // errno status naming the file when a read fails.
  static constexpr int kFingerprintSamples = 64;
  static constexpr int64_t kFingerprintBlockBytes = 4096;
  absl::StatusOr<uint64_t> SampledFingerprint() const;
  // "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // The metadata value of `key`, or NOT_FOUND naming the file and key.
  absl::StatusOr<std::string> Metadata(absl::string_view key) const;
  // Every tensor, by name.
  const std::map<std::string, SafetensorsTensor, std::less<>>& tensors() const {
    return tensors_;
  }
  // nullptr when the file has no tensor of that name.
  const SafetensorsTensor* Find(absl::string_view name) const;
  // The tensor `name` with exactly `shape`, in a dtype ReadFloats converts:
  // NOT_FOUND "PATH: no tensor 'NAME'", INVALID_ARGUMENT "PATH: tensor
  // 'NAME' has shape [..], expected [..]" or "... dtype I64 ...".
  absl::StatusOr<const SafetensorsTensor*> Expect(
      absl::string_view name, const std::vector<int64_t>& shape) const;

  // Reads elements [offset, offset + count) of `tensor` (one of tensors())
  // into out as fp32. INVALID_ARGUMENT for a range outside the tensor or an
  // unconvertible dtype; DATA_LOSS when the file has shrunk since Open;
  // the errno's status otherwise.
  absl::Status ReadFloats(const SafetensorsTensor& tensor, int64_t offset,
                          int64_t count, float* out) const;

 private:
  SafetensorsReader() = default;
  absl::Status ParseHeader(absl::string_view json, int64_t data_begin);

  std::string path_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  uint32_t header_crc32c_ = 0;
  int64_t data_begin_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensor, std::less<>> tensors_;
};

}  // namespace shardd::state

#endif  // SHARDD_DAEMON_STATE_SAFETENSORS_READER_H_
