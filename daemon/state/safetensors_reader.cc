#include "daemon/state/safetensors_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/dtype.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace shardd::state {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

// Bytes per element of the safetensors dtypes (0: unknown).
int64_t ElementBytes(absl::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") {
    return 2;
  }
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

bool Convertible(absl::string_view dtype) {
  return dtype == "F32" || dtype == "BF16" || dtype == "F16" || dtype == "F64";
}

// JSON numbers arrive as doubles: integers up to 2^53 are exact, which
// covers every offset of a file below 8 PiB.
bool AsIndex(const Value& v, int64_t* out) {
  if (v.kind_case() != Value::kNumberValue) return false;
  const double d = v.number_value();
  if (!(d >= 0) || d > 9007199254740992.0 || std::floor(d) != d) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status PreadFully(int fd, char* out, int64_t bytes, int64_t offset,
                        const std::string& path) {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = pread(fd, out + done, bytes - done, offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated (reading ", bytes, " bytes at offset ", offset,
          " hit the end of the file)"));
    }
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_bytes_(other.file_bytes_),
      header_crc32c_(other.header_crc32c_),
      data_begin_(other.data_begin_),
      metadata_(std::move(other.metadata_)),
      tensors_(std::move(other.tensors_)) {}

SafetensorsReader& SafetensorsReader::operator=(
    SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_bytes_ = other.file_bytes_;
    header_crc32c_ = other.header_crc32c_;
    data_begin_ = other.data_begin_;
    metadata_ = std::move(other.metadata_);
    tensors_ = std::move(other.tensors_);
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(
    const std::string& path) {
  SafetensorsReader reader;
  reader.path_ = path;
  reader.fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (reader.fd_ < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  struct stat st;
  if (fstat(reader.fd_, &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  reader.file_bytes_ = st.st_size;
  if (reader.file_bytes_ < 8) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated (", reader.file_bytes_,
                     " bytes, shorter than the 8-byte header length)"));
  }
  unsigned char prefix[8];
  if (absl::Status s =
          PreadFully(reader.fd_, reinterpret_cast<char*>(prefix), 8, 0, path);
      !s.ok()) {
    return s;
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | prefix[i];
  if (header_bytes > static_cast<uint64_t>(kMaxHeaderBytes)) {
    return absl::DataLossError(
        absl::StrCat(path, ": header length ", header_bytes,
                     " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }
  if (8 + static_cast<int64_t>(header_bytes) > reader.file_bytes_) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated (header length ", header_bytes,
        " runs past the end of the ", reader.file_bytes_, "-byte file)"));
  }
  std::string header(header_bytes, '\0');
  if (absl::Status s =
          PreadFully(reader.fd_, header.data(), header_bytes, 8, path);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = reader.ParseHeader(header, 8 + header_bytes); !s.ok()) {
    return s;
  }
  reader.header_crc32c_ = core::Crc32c(header.data(), header_bytes);
  reader.data_begin_ = 8 + header_bytes;
  return reader;
}

absl::Status SafetensorsReader::ParseHeader(absl::string_view json,
                                            int64_t data_begin) {
  // The writer pads the header with spaces to an 8-byte multiple.
  while (!json.empty() && json.back() == ' ') json.remove_suffix(1);
  if (json.empty() || json.front() != '{') {
    return absl::DataLossError(
        absl::StrCat(path_, ": the header is not a JSON object"));
  }
  Struct root;
  google::protobuf::util::JsonParseOptions options;
  if (auto s = google::protobuf::util::JsonStringToMessage(std::string(json),
                                                           &root, options);
      !s.ok()) {
    return absl::DataLossError(absl::StrCat(
        path_, ": the header is not valid JSON: ", s.message().ToString()));
  }
  const int64_t data_bytes = file_bytes_ - data_begin;
  std::vector<std::pair<int64_t, const SafetensorsTensor*>> order;
  for (const auto& [name, value] : root.fields()) {
    if (name == "__metadata__") {
      if (value.kind_case() != Value::kStructValue) {
        return absl::DataLossError(
            absl::StrCat(path_, ": __metadata__ is not an object"));
      }
      for (const auto& [k, v] : value.struct_value().fields()) {
        if (v.kind_case() != Value::kStringValue) {
          return absl::DataLossError(
              absl::StrCat(path_, ": __metadata__ '", k, "' is not a string"));
        }
        metadata_[k] = v.string_value();
      }
      continue;
    }
    const std::string what = absl::StrCat(path_, ": tensor '", name, "'");
    if (value.kind_case() != Value::kStructValue) {
      return absl::DataLossError(absl::StrCat(what, " is not an object"));
    }
    const auto& fields = value.struct_value().fields();
    SafetensorsTensor t;
    t.name = name;
    const auto dtype = fields.find("dtype");
    const auto shape = fields.find("shape");
    const auto offsets = fields.find("data_offsets");
    if (dtype == fields.end() || shape == fields.end() ||
        offsets == fields.end()) {
      return absl::DataLossError(
          absl::StrCat(what, " lacks dtype, shape or data_offsets"));
    }
    if (dtype->second.kind_case() != Value::kStringValue ||
        (t.element_bytes = ElementBytes(dtype->second.string_value())) == 0) {
      return absl::DataLossError(absl::StrCat(what, ": unknown dtype"));
    }
    t.dtype = dtype->second.string_value();
    if (shape->second.kind_case() != Value::kListValue) {
      return absl::DataLossError(absl::StrCat(what, ": shape is not a list"));
    }
    t.numel = 1;
    for (const Value& d : shape->second.list_value().values()) {
      int64_t dim = 0;
      if (!AsIndex(d, &dim)) {
        return absl::DataLossError(
            absl::StrCat(what, ": shape holds a non-integer or negative dim"));
      }
      t.shape.push_back(dim);
      if (dim != 0 && t.numel > data_bytes / dim) {
        return absl::DataLossError(
            absl::StrCat(what, ": shape ", ShapeText(t.shape),
                         " is larger than the file's data"));
      }
      t.numel *= dim;
    }
    if (offsets->second.kind_case() != Value::kListValue ||
        offsets->second.list_value().values_size() != 2 ||
        !AsIndex(offsets->second.list_value().values(0), &t.begin) ||
        !AsIndex(offsets->second.list_value().values(1), &t.end)) {
      return absl::DataLossError(
          absl::StrCat(what, ": data_offsets is not [begin, end]"));
    }
    if (t.begin > t.end || t.end > data_bytes) {
      return absl::DataLossError(
          absl::StrCat(what, ": data_offsets [", t.begin, ", ", t.end,
                       "] fall outside the data area of ", data_bytes,
                       " bytes (a truncated or corrupt file)"));
    }
    if (t.end - t.begin != t.numel * t.element_bytes) {
      return absl::DataLossError(
          absl::StrCat(what, ": data_offsets hold ", t.end - t.begin,
                       " bytes but shape ", ShapeText(t.shape), " of ", t.dtype,
                       " needs ", t.numel * t.element_bytes));
    }
    t.begin += data_begin;
    t.end += data_begin;
    auto [it, inserted] = tensors_.emplace(name, std::move(t));
    order.emplace_back(it->second.begin, &it->second);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first
                              : a.second->end < b.second->end;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const SafetensorsTensor& prev = *order[i - 1].second;
    const SafetensorsTensor& next = *order[i].second;
    if (next.begin < prev.end) {
      return absl::DataLossError(absl::StrCat(path_, ": tensors '", prev.name,
                                              "' and '", next.name,
                                              "' overlap in the file"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SafetensorsReader::Metadata(
    absl::string_view key) const {
  auto it = metadata_.find(std::string(key));
  if (it == metadata_.end()) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": no __metadata__ '", key, "'"));
  }
  return it->second;
}

const SafetensorsTensor* SafetensorsReader::Find(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<const SafetensorsTensor*> SafetensorsReader::Expect(
    absl::string_view name, const std::vector<int64_t>& shape) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  }
  if (t->shape != shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' has shape ",
                     ShapeText(t->shape), ", expected ", ShapeText(shape)));
  }
  if (!Convertible(t->dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' has dtype ", t->dtype,
                     "; F32, BF16, F16 or F64 can be loaded"));
  }
  return t;
}

absl::StatusOr<uint64_t> SafetensorsReader::SampledFingerprint() const {
  // FNV-1a over the 8 bytes of each value folded in.
  uint64_t digest = 0xcbf29ce484222325ull;
  auto mix = [&digest](uint64_t value) {
    for (int i = 0; i < 8; ++i) {
      digest ^= (value >> (8 * i)) & 0xffu;
      digest *= 0x100000001b3ull;
    }
  };
  mix(static_cast<uint64_t>(file_bytes_));
  mix(header_crc32c_);
  const int64_t data = file_bytes_ - data_begin_;
  if (data <= 0) return digest;
  std::vector<char> block(kFingerprintBlockBytes);
  const int64_t blocks = std::min<int64_t>(
      kFingerprintSamples,
      (data + kFingerprintBlockBytes - 1) / kFingerprintBlockBytes);
  for (int64_t i = 0; i < blocks; ++i) {
    // Evenly spread; the last block ends at the file's end.
    const int64_t span = data - kFingerprintBlockBytes;
    const int64_t at =
        span <= 0 ? 0 : (blocks == 1 ? 0 : span * i / (blocks - 1));
    const int64_t n = std::min(kFingerprintBlockBytes, data - at);
    if (absl::Status s =
            PreadFully(fd_, block.data(), n, data_begin_ + at, path_);
        !s.ok()) {
      return s;
    }
    mix(static_cast<uint64_t>(at));
    mix(core::Crc32c(block.data(), n));
  }
  return digest;
}

absl::Status SafetensorsReader::ReadFloats(const SafetensorsTensor& tensor,
                                           int64_t offset, int64_t count,
                                           float* out) const {
  if (offset < 0 || count < 0 || offset > tensor.numel ||
      count > tensor.numel - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", tensor.name, "': elements [", offset,
                     ", ", offset + count, ") outside its ", tensor.numel));
  }
  if (!Convertible(tensor.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", tensor.name, "' has dtype ",
                     tensor.dtype, "; F32, BF16, F16 or F64 can be loaded"));
  }
  const int64_t at = tensor.begin + offset * tensor.element_bytes;
  if (tensor.dtype == "F32") {
    return PreadFully(fd_, reinterpret_cast<char*>(out), count * 4, at, path_);
  }
  // Converted in bounded pieces: the staging buffer stays small however
  // large the range.
  constexpr int64_t kPiece = 1 << 16;
  std::vector<char> buf(std::min(count, kPiece) * tensor.element_bytes);
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kPiece, count - done);
    if (absl::Status s = PreadFully(fd_, buf.data(), n * tensor.element_bytes,
                                    at + done * tensor.element_bytes, path_);
        !s.ok()) {
      return s;
    }
    for (int64_t i = 0; i < n; ++i) {
      const char* p = buf.data() + i * tensor.element_bytes;
      if (tensor.dtype == "F64") {
        double d;
        std::memcpy(&d, p, 8);
        out[done + i] = static_cast<float>(d);
      } else {
        uint16_t h;
        std::memcpy(&h, p, 2);
        out[done + i] = tensor.dtype == "BF16" ? core::BFloat16ToFloat(h)
                                               : core::HalfToFloat(h);
      }
    }
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace shardd::state
