#include "daemon/recovery/shard_checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/core/crc32c.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::recovery {
namespace {

constexpr char kMagic[] = "SHRDCKP1";
constexpr char kEndMagic[] = "SHRDEND1";
constexpr int64_t kMagicBytes = 8;
constexpr int64_t kPrefixBytes = kMagicBytes + 8;  // Magic + header length.
constexpr int64_t kMaxHeaderBytes = int64_t{64} << 20;
constexpr int64_t kIoPieceBytes = int64_t{64} << 20;

absl::Status ErrnoError(absl::string_view path, absl::string_view what,
                        int error) {
  return absl::ErrnoToStatus(error, absl::StrCat(path, ": ", what));
}

void PutLe64(uint64_t v, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutLe32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint32_t GetLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

std::string RankDir(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/rank-", rank);
}

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, const void* data, int64_t n,
                      const std::string& path) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w =
        ::write(fd, p, static_cast<size_t>(std::min(n, kIoPieceBytes)));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "write", errno);
    }
    p += w;
    n -= w;
  }
  return absl::OkStatus();
}

// Reads exactly n bytes at offset (the caller checked the file's size).
absl::Status PreadAll(int fd, void* data, int64_t n, int64_t offset,
                      const std::string& path) {
  uint8_t* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r =
        ::pread(fd, p, static_cast<size_t>(std::min(n, kIoPieceBytes)), offset);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "read", errno);
    }
    if (r == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": file shrank while being read"));
    }
    p += r;
    n -= r;
    offset += r;
  }
  return absl::OkStatus();
}

absl::Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(dir, "open directory", errno);
  Fd closer(fd);
  if (::fsync(fd) != 0) return ErrnoError(dir, "fsync directory", errno);
  return absl::OkStatus();
}

// mkdir -p; fsyncs the parent of every directory it creates.
absl::Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": exists and is not a directory"));
  }
  const size_t slash = dir.find_last_of('/');
  const std::string parent = slash == std::string::npos
                                 ? "."
                                 : (slash == 0 ? "/" : dir.substr(0, slash));
  if (slash != std::string::npos && parent != dir) {
    absl::Status status = MakeDirs(parent);
    if (!status.ok()) return status;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError(dir, "mkdir", errno);
  }
  return FsyncDir(parent);
}

// Parses "step-<N>.shardckpt"; -1 for any other name.
int64_t StepOfName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "step-") ||
      !absl::ConsumeSuffix(&name, ".shardckpt") || name.empty()) {
    return -1;
  }
  for (char c : name) {
    if (c < '0' || c > '9') return -1;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return -1;
  return step;
}

// ".step-<N>.shardckpt.tmp.<pid>" -> pid; -1 for any other name.
int64_t PidOfTempName(absl::string_view name) {
  if (!absl::StartsWith(name, ".step-")) return -1;
  const size_t tmp = name.rfind(".shardckpt.tmp.");
  if (tmp == absl::string_view::npos) return -1;
  int64_t pid = 0;
  if (!absl::SimpleAtoi(name.substr(tmp + strlen(".shardckpt.tmp.")), &pid)) {
    return -1;
  }
  return pid;
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoError(dir, "opendir", errno);
  std::vector<std::string> names;
  while (struct dirent* entry = ::readdir(d)) names.push_back(entry->d_name);
  ::closedir(d);
  return names;
}

// Removes a checkpoint temporary whose writer is dead (its flock is free);
// true when removed.
bool RemoveIfWriterDead(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  Fd closer(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return false;  // A live writer.
  return ::unlink(path.c_str()) == 0;
}

void Prune(const std::string& rank_dir, int64_t written_step, int keep_last,
           int64_t keep_step) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(rank_dir);
  if (!names.ok()) return;
  std::vector<int64_t> older;
  const int64_t self = ::getpid();
  for (const std::string& name : *names) {
    const int64_t step = StepOfName(name);
    if (step > written_step) {
      ::unlink(absl::StrCat(rank_dir, "/", name).c_str());
    } else if (step >= 0 && step < written_step) {
      older.push_back(step);
    } else if (step < 0 && PidOfTempName(name) >= 0 &&
               PidOfTempName(name) != self) {
      RemoveIfWriterDead(absl::StrCat(rank_dir, "/", name));
    }
  }
  std::sort(older.begin(), older.end(), std::greater<>());
  for (size_t i = static_cast<size_t>(keep_last - 1); i < older.size(); ++i) {
    if (older[i] == keep_step) continue;
    ::unlink(absl::StrCat(rank_dir, "/step-", older[i], ".shardckpt").c_str());
  }
}

// An open checkpoint whose header and size were checked.
struct OpenCheckpoint {
  v1::ShardHeader header;
  int64_t payload_offset = 0;
  int64_t footer_offset = 0;
  uint32_t header_crc = 0;  // Of magic, length and header bytes.
};

absl::Status Truncated(const std::string& path, int64_t expected, int64_t found,
                       bool at_least) {
  return absl::DataLossError(absl::StrCat(path, ": truncated (expected ",
                                          at_least ? "at least " : "", expected,
                                          " bytes, found ", found, ")"));
}

// Opens and checks `path`; the descriptor goes to *fd_holder.
absl::StatusOr<OpenCheckpoint> Open(const std::string& path, Fd* fd_holder) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return ErrnoError(path, "open", errno);
  }
  fd_holder->reset(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(path, "fstat", errno);
  const int64_t size = st.st_size;
  if (size < kPrefixBytes) return Truncated(path, kPrefixBytes, size, true);
  uint8_t prefix[kPrefixBytes];
  absl::Status status = PreadAll(fd, prefix, kPrefixBytes, 0, path);
  if (!status.ok()) return status;
  if (std::memcmp(prefix, kMagic, kMagicBytes) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a shard checkpoint (bad magic)"));
  }
  const uint64_t header_length = GetLe64(prefix + kMagicBytes);
  if (header_length > static_cast<uint64_t>(kMaxHeaderBytes)) {
    return absl::DataLossError(
        absl::StrCat(path, ": implausible header length ", header_length));
  }
  const int64_t payload_offset =
      kPrefixBytes + static_cast<int64_t>(header_length);
  if (size < payload_offset) return Truncated(path, payload_offset, size, true);
  std::string header_bytes(header_length, '\0');
  status = PreadAll(fd, header_bytes.data(),
                    static_cast<int64_t>(header_length), kPrefixBytes, path);
  if (!status.ok()) return status;
  OpenCheckpoint ckpt;
  ckpt.payload_offset = payload_offset;
  ckpt.header_crc =
      core::Crc32cExtend(core::Crc32c(prefix, kPrefixBytes),
                         header_bytes.data(), header_bytes.size());
  if (!ckpt.header.ParseFromString(header_bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": header does not parse"));
  }
  if (absl::Status layout = ValidateShardHeaderLayout(ckpt.header);
      !layout.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", layout.message()));
  }
  const int64_t sections = ckpt.header.sections_size();
  ckpt.footer_offset = payload_offset + ckpt.header.total_bytes();
  const int64_t expected =
      ckpt.footer_offset + 4 * sections + 4 + 4 + kMagicBytes;
  if (size < expected) return Truncated(path, expected, size, false);
  if (size > expected) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", size - expected, " bytes too many (expected ",
                     expected, " bytes, found ", size, ")"));
  }
  uint8_t tail[4 + kMagicBytes];
  status = PreadAll(fd, tail, sizeof(tail), expected - sizeof(tail), path);
  if (!status.ok()) return status;
  if (std::memcmp(tail + 4, kEndMagic, kMagicBytes) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": bad end magic (corrupt footer)"));
  }
  const uint32_t stored_header_crc = GetLe32(tail);
  if (stored_header_crc != ckpt.header_crc) {
    return absl::DataLossError(absl::StrFormat(
        "%s: header crc32c mismatch (stored 0x%08x, computed 0x%08x)", path,
        stored_header_crc, ckpt.header_crc));
  }
  const size_t slash = path.find_last_of('/');
  const int64_t named_step = StepOfName(
      slash == std::string::npos ? absl::string_view(path)
                                 : absl::string_view(path).substr(slash + 1));
  if (named_step >= 0 && named_step != ckpt.header.step()) {
    return absl::DataLossError(absl::StrCat(path, ": holds step ",
                                            ckpt.header.step(),
                                            ", not the step in its name"));
  }
  return ckpt;
}

}  // namespace

std::string ShardCheckpointPath(const std::string& dir, int rank,
                                int64_t step) {
  return absl::StrCat(RankDir(dir, rank), "/step-", step, ".shardckpt");
}

absl::StatusOr<std::string> WriteShardCheckpoint(
    const std::string& dir, int rank, v1::ShardHeader header,
    const std::vector<SectionSource>& sources, int keep_last,
    const ShardMemory& memory, int64_t keep_step) {
  if (rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " < 0"));
  }
  if (header.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("header step ", header.step(), " < 0"));
  }
  // The writer validates the sources and lays out the header exactly as the
  // stream does.
  absl::StatusOr<ShardStreamWriter> layout =
      ShardStreamWriter::Create(std::move(header), sources, 0, 0);
  if (!layout.ok()) return layout.status();
  const v1::ShardHeader& full = layout->header();

  const std::string rank_dir = RankDir(dir, rank);
  absl::Status status = MakeDirs(rank_dir);
  if (!status.ok()) return status;
  const std::string path = ShardCheckpointPath(dir, rank, full.step());
  const std::string temp = absl::StrCat(rank_dir, "/.step-", full.step(),
                                        ".shardckpt.tmp.", ::getpid());

  const int raw_fd =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (raw_fd < 0) return ErrnoError(temp, "create", errno);
  Fd fd(raw_fd);
  // Held until the file is renamed or this process dies: a sweeper removes
  // only temporaries it can lock, i.e. a dead writer's.
  if (::flock(raw_fd, LOCK_EX) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return ErrnoError(temp, "flock", err);
  }
  auto fail = [&](absl::Status s) {
    ::unlink(temp.c_str());
    return s;
  };

  std::string prefix(kPrefixBytes, '\0');
  std::memcpy(prefix.data(), kMagic, kMagicBytes);
  const std::string header_bytes = full.SerializeAsString();
  PutLe64(header_bytes.size(),
          reinterpret_cast<uint8_t*>(prefix.data()) + kMagicBytes);
  const uint32_t header_crc =
      core::Crc32cExtend(core::Crc32c(prefix.data(), prefix.size()),
                         header_bytes.data(), header_bytes.size());
  prefix += header_bytes;
  status = WriteAll(fd.get(), prefix.data(),
                    static_cast<int64_t>(prefix.size()), temp);
  if (!status.ok()) return fail(status);

  std::string footer;
  uint32_t payload_crc = 0;
  const int64_t half = full.total_bytes() / 2;
  int64_t written = 0;
  bool fired = false;
  auto maybe_fire = [&] {
    if (!fired && written >= half) {
      fired = true;
      SHARDD_FAILPOINT("checkpoint.write.mid");
    }
  };
  maybe_fire();
  // Memory the host cannot address is written from a bounded host copy.
  constexpr int64_t kBounce = int64_t{4} << 20;
  std::vector<uint8_t> bounce;
  for (const SectionSource& source : sources) {
    const int64_t length = source.section.byte_length();
    uint32_t section_crc = 0;
    int64_t offset = 0;
    while (offset < length) {
      int64_t piece = length - offset;
      if (!fired) piece = std::min(piece, half - written);
      const uint8_t* data = source.data + offset;
      if (!memory.host_addressable()) {
        piece = std::min(piece, kBounce);
        bounce.resize(static_cast<size_t>(piece));
        status = memory.Read(bounce.data(), data, piece);
        if (!status.ok()) return fail(status);
        data = bounce.data();
      }
      status = WriteAll(fd.get(), data, piece, temp);
      if (!status.ok()) return fail(status);
      // One pass over the bytes; the payload CRC is folded from the piece's.
      const uint32_t piece_crc = core::Crc32c(data, static_cast<size_t>(piece));
      section_crc = core::Crc32cCombine(section_crc, piece_crc,
                                        static_cast<uint64_t>(piece));
      payload_crc = core::Crc32cCombine(payload_crc, piece_crc,
                                        static_cast<uint64_t>(piece));
      offset += piece;
      written += piece;
      maybe_fire();
    }
    PutLe32(section_crc, &footer);
  }
  PutLe32(payload_crc, &footer);
  PutLe32(header_crc, &footer);
  footer.append(kEndMagic, kMagicBytes);
  status = WriteAll(fd.get(), footer.data(),
                    static_cast<int64_t>(footer.size()), temp);
  if (!status.ok()) return fail(status);
  if (::fsync(fd.get()) != 0) return fail(ErrnoError(temp, "fsync", errno));
  if (::close(fd.release()) != 0) {
    return fail(ErrnoError(temp, "close", errno));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return fail(ErrnoError(path, "rename", errno));
  }
  status = FsyncDir(rank_dir);
  if (!status.ok()) return status;
  if (keep_last >= 1) Prune(rank_dir, full.step(), keep_last, keep_step);
  return path;
}

absl::StatusOr<std::vector<int64_t>> ListShardCheckpoints(
    const std::string& dir, int rank) {
  const std::string rank_dir = RankDir(dir, rank);
  const absl::Status none = absl::NotFoundError(
      absl::StrCat("no checkpoint for rank ", rank, " in ", rank_dir));
  absl::StatusOr<std::vector<std::string>> names = ListDir(rank_dir);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) return none;
    return names.status();
  }
  std::vector<int64_t> steps;
  for (const std::string& name : *names) {
    const int64_t step = StepOfName(name);
    if (step >= 0) steps.push_back(step);
  }
  if (steps.empty()) return none;
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::string> LatestShardCheckpoint(const std::string& dir,
                                                  int rank) {
  absl::StatusOr<std::vector<int64_t>> steps = ListShardCheckpoints(dir, rank);
  if (!steps.ok()) return steps.status();
  return ShardCheckpointPath(dir, rank, steps->back());
}

absl::StatusOr<std::vector<std::string>> RemoveDeadCheckpointTemporaries(
    const std::string& dir, int rank) {
  const std::string rank_dir = RankDir(dir, rank);
  absl::StatusOr<std::vector<std::string>> names = ListDir(rank_dir);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) return std::vector<std::string>();
    return names.status();
  }
  std::vector<std::string> removed;
  for (const std::string& name : *names) {
    if (PidOfTempName(name) < 0) continue;
    const std::string path = absl::StrCat(rank_dir, "/", name);
    struct stat st;
    const int64_t bytes =
        ::lstat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
    if (RemoveIfWriterDead(path)) {
      removed.push_back(absl::StrCat(path, " (", bytes, " bytes)"));
    }
  }
  return removed;
}

absl::Status RemoveShardCheckpointsAbove(const std::string& dir, int rank,
                                         int64_t step) {
  const std::string rank_dir = RankDir(dir, rank);
  absl::StatusOr<std::vector<std::string>> names = ListDir(rank_dir);
  if (!names.ok()) {
    return absl::IsNotFound(names.status()) ? absl::OkStatus() : names.status();
  }
  for (const std::string& name : *names) {
    if (StepOfName(name) <= step) continue;
    const std::string path = absl::StrCat(rank_dir, "/", name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError(path, "unlink", errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ShardHeader> ReadShardCheckpointHeader(
    const std::string& path) {
  Fd fd(-1);
  absl::StatusOr<OpenCheckpoint> ckpt = Open(path, &fd);
  if (!ckpt.ok()) return ckpt.status();
  return std::move(ckpt->header);
}

absl::Status ReadShardCheckpoint(const std::string& path,
                                 const ShardStreamAssembler::Destination& dest,
                                 v1::ShardHeader* header_out,
                                 uint32_t* payload_crc_out,
                                 const ShardMemory& memory) {
  Fd fd(-1);
  absl::StatusOr<OpenCheckpoint> ckpt = Open(path, &fd);
  if (!ckpt.ok()) return ckpt.status();
  const v1::ShardHeader& header = ckpt->header;
  const int n = header.sections_size();
  std::string footer(4 * n + 4, '\0');
  absl::Status status =
      PreadAll(fd.get(), footer.data(), static_cast<int64_t>(footer.size()),
               ckpt->footer_offset, path);
  if (!status.ok()) return status;
  const uint8_t* stored = reinterpret_cast<const uint8_t*>(footer.data());

  uint32_t payload_crc = 0;
  for (int i = 0; i < n; ++i) {
    const v1::ShardSection& section = header.sections(i);
    absl::StatusOr<uint8_t*> out = dest(header, i);
    if (!out.ok()) return out.status();
    if (*out == nullptr && section.byte_length() > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": no destination for ", DescribeSection(header, i), " (",
          section.byte_length(), " bytes)"));
    }
    const size_t length = static_cast<size_t>(section.byte_length());
    uint32_t crc = 0;
    if (memory.host_addressable()) {
      status = PreadAll(fd.get(), *out, section.byte_length(),
                        ckpt->payload_offset + section.stream_offset(), path);
      if (!status.ok()) return status;
      crc = core::Crc32c(*out, length);
    } else {
      // Through a bounded host buffer into memory the host cannot address.
      constexpr int64_t kBounce = int64_t{4} << 20;
      std::vector<uint8_t> bounce(
          static_cast<size_t>(std::min(section.byte_length(), kBounce)));
      for (int64_t done = 0; done < section.byte_length(); done += kBounce) {
        const int64_t n = std::min(kBounce, section.byte_length() - done);
        status = PreadAll(fd.get(), bounce.data(), n,
                          ckpt->payload_offset + section.stream_offset() + done,
                          path);
        if (!status.ok()) return status;
        crc = core::Crc32cExtend(crc, bounce.data(), static_cast<size_t>(n));
        status = memory.Write(*out + done, bounce.data(), n);
        if (!status.ok()) return status;
      }
    }
    const uint32_t expected = GetLe32(stored + 4 * i);
    if (crc != expected) {
      return absl::DataLossError(absl::StrFormat(
          "%s: %s: crc32c mismatch (stored 0x%08x, computed 0x%08x)", path,
          DescribeSection(header, i), expected, crc));
    }
    payload_crc = core::Crc32cCombine(payload_crc, crc, length);
  }
  const uint32_t expected_payload = GetLe32(stored + 4 * n);
  if (payload_crc != expected_payload) {
    return absl::DataLossError(absl::StrFormat(
        "%s: payload crc32c mismatch (stored 0x%08x, computed 0x%08x)", path,
        expected_payload, payload_crc));
  }
  if (header_out != nullptr) *header_out = header;
  if (payload_crc_out != nullptr) *payload_crc_out = payload_crc;
  return absl::OkStatus();
}

namespace {

// Memory the host "cannot address" whose writes go nowhere: reading a
// checkpoint into it checks every CRC through the reader's bounded buffer
// and keeps nothing.
class DiscardingMemory : public ShardMemory {
 public:
  bool host_addressable() const override { return false; }
  absl::Status Read(uint8_t*, const uint8_t*, int64_t) const override {
    return absl::InternalError("DiscardingMemory holds nothing to read");
  }
  absl::Status Write(uint8_t*, const uint8_t*, int64_t) const override {
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<v1::ShardHeader> VerifyShardCheckpoint(const std::string& path) {
  static const DiscardingMemory kDiscard;
  // Any non-null destination: the discarding memory never writes to it.
  static uint8_t sink;
  v1::ShardHeader header;
  absl::Status read = ReadShardCheckpoint(
      path,
      [](const v1::ShardHeader&, int) -> absl::StatusOr<uint8_t*> {
        return &sink;
      },
      &header, nullptr, kDiscard);
  if (!read.ok()) return read;
  return header;
}

}  // namespace shardd::recovery
