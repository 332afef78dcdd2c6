#include "daemon/state/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/crc32c.h"

namespace shardd::state {
namespace {

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// absl::ErrnoToStatus, except that a full file system and the process's
// file size limit are both RESOURCE_EXHAUSTED (the caller frees space or
// writes elsewhere; ErrnoToStatus makes EFBIG OUT_OF_RANGE).
absl::Status WriteError(int err, absl::string_view what) {
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", absl::ErrnoToStatus(err, "").message()));
  }
  return absl::ErrnoToStatus(err, what);
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::string SafetensorsHeader(
    const std::vector<SafetensorsTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<std::string> fields;
  std::vector<std::string> meta;
  for (const auto& [k, v] : metadata) {
    meta.push_back(absl::StrCat(JsonString(k), ":", JsonString(v)));
  }
  fields.push_back(
      absl::StrCat("\"__metadata__\":{", absl::StrJoin(meta, ","), "}"));
  int64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    fields.push_back(absl::StrCat(
        JsonString(t.name), ":{\"dtype\":", JsonString(t.dtype), ",\"shape\":[",
        absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset, ",",
        offset + t.bytes, "]}"));
    offset += t.bytes;
  }
  std::string header = absl::StrCat("{", absl::StrJoin(fields, ","), "}");
  while (header.size() % 8 != 0) header.push_back(' ');
  return header;
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    std::string path, const std::vector<SafetensorsTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata,
    bool overwrite) {
  int64_t data_bytes = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", t.name, " has negative size"));
    }
    data_bytes += t.bytes;
  }
  if (!overwrite && access(path.c_str(), F_OK) == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " exists and overwrite is false"));
  }
  const std::string header = SafetensorsHeader(tensors, metadata);
  std::string prefix(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) {
    prefix[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  }
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return WriteError(errno, absl::StrCat("cannot create ", tmp));
  std::unique_ptr<SafetensorsWriter> writer(
      new SafetensorsWriter(std::move(path), std::move(tmp), fd,
                            8 + static_cast<int64_t>(n) + data_bytes));
  // Reserving the space up front fails fast (and leaves no partial file)
  // when the file system cannot hold the file; where fallocate is not
  // supported the writes find out.
  const int reserved = posix_fallocate(fd, 0, writer->total_bytes_);
  if (reserved == ENOSPC || reserved == EDQUOT || reserved == EFBIG) {
    return writer->Fail(
        WriteError(reserved, absl::StrCat("cannot write ", writer->path_, " (",
                                          writer->total_bytes_, " bytes)")));
  }
  if (absl::Status s = writer->Write(prefix.data(), 8); !s.ok()) return s;
  if (absl::Status s = writer->Write(header.data(), n); !s.ok()) return s;
  return writer;
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::string tmp, int fd,
                                     int64_t total_bytes)
    : path_(std::move(path)),
      tmp_(std::move(tmp)),
      fd_(fd),
      total_bytes_(total_bytes) {}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) Abandon();
}

void SafetensorsWriter::Abandon() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
    unlink(tmp_.c_str());
  }
}

absl::Status SafetensorsWriter::Fail(absl::Status status) {
  error_ = status;
  Abandon();
  return status;
}

absl::Status SafetensorsWriter::Write(const void* data, int64_t n) {
  // In slices, each checksummed right after write(2) copied it, while it is
  // still in the CPU's cache: one pass over memory instead of two.
  constexpr int64_t kSlice = int64_t{1} << 20;
  const char* p = static_cast<const char*>(data);
  int64_t done = 0;
  while (done < n) {
    const int64_t len = std::min(kSlice, n - done);
    int64_t sliced = 0;
    while (sliced < len) {
      const ssize_t w = write(fd_, p + done + sliced, len - sliced);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Fail(WriteError(
            errno, absl::StrCat("cannot write ", path_, " (at byte ",
                                written_bytes_ + done + sliced, ")")));
      }
      sliced += w;
    }
    crc_ = core::Crc32cExtend(crc_, p + done, len);
    done += len;
  }
  written_bytes_ += n;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Append(const void* data, int64_t n) {
  if (!error_.ok()) return absl::FailedPreconditionError(error_.message());
  if (finished_ || fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": the writer is finished"));
  }
  if (n < 0 || written_bytes_ + n > total_bytes_) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat(path_, ": ", n, " bytes appended past the declared ",
                     total_bytes_, " (", written_bytes_, " written)")));
  }
  return Write(data, n);
}

absl::StatusOr<WrittenFile> SafetensorsWriter::Finish() {
  if (!error_.ok()) return absl::FailedPreconditionError(error_.message());
  if (finished_ || fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": the writer is finished"));
  }
  if (written_bytes_ != total_bytes_) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        path_, ": ", written_bytes_, " of ", total_bytes_, " bytes written")));
  }
  if (fsync(fd_) != 0) {
    return Fail(WriteError(errno, absl::StrCat("cannot fsync ", path_)));
  }
  if (close(fd_) != 0) {
    fd_ = -1;
    unlink(tmp_.c_str());
    return Fail(WriteError(errno, absl::StrCat("cannot close ", path_)));
  }
  fd_ = -1;
  if (rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    unlink(tmp_.c_str());
    return Fail(
        WriteError(err, absl::StrCat("cannot rename ", tmp_, " to ", path_)));
  }
  finished_ = true;
  // The rename is durable once the directory is (best effort: some file
  // systems refuse fsync on a directory).
  const int dir =
      open(Dirname(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)fsync(dir);
    close(dir);
  }
  WrittenFile file;
  file.path = path_;
  file.bytes = written_bytes_;
  file.crc32c = crc_;
  return file;
}

}  // namespace shardd::state
