#include "daemon/state/state_import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/model_config.h"
#include "daemon/core/unit_layout.h"
#include "daemon/node/proto_convert.h"
#include "daemon/recovery/shard_checkpoint.h"
#include "daemon/state/reshard_map.h"
#include "daemon/state/resume_point.h"
#include "daemon/state/safetensors_reader.h"
#include "daemon/state/shard_filler.h"

namespace shardd::state {
namespace {

using Kind = node::StepEngine::StateKind;

// A state kind's name in our exports (PyTorch's optimizer state names).
const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kParameters:
      return "master";
    case Kind::kExpAvg:
      return "exp_avg";
    case Kind::kExpAvgSq:
      return "exp_avg_sq";
    case Kind::kMomentum:
      return "momentum_buffer";
  }
  return "unknown";
}

const char* OptimizerName(core::OptimizerKind kind) {
  switch (kind) {
    case core::OptimizerKind::kAdamW:
      return "adamw";
    case core::OptimizerKind::kSgdMomentum:
      return "sgd_momentum";
    case core::OptimizerKind::kSgd:
      return "sgd";
  }
  return "unknown";
}

absl::StatusOr<Kind> KindFromSection(v1::ShardSectionKind kind) {
  switch (kind) {
    case v1::SHARD_SECTION_KIND_PARAMETERS:
      return Kind::kParameters;
    case v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG:
      return Kind::kExpAvg;
    case v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG_SQ:
      return Kind::kExpAvgSq;
    case v1::SHARD_SECTION_KIND_SGD_MOMENTUM:
      return Kind::kMomentum;
    default:
      return absl::DataLossError(
          absl::StrCat("unknown section kind ", static_cast<int>(kind)));
  }
}

// Reads `count` elements at element `offset` of one saved shard into out.
using ShardReader =
    std::function<absl::Status(int64_t offset, int64_t count, float* out)>;

// One (unit, kind) of the saved state: the flat ranges its pieces cover (in
// the unit's flat coordinates, the same for every F) and how to read each.
struct SavedShards {
  std::vector<core::ShardRange> ranges;
  std::vector<ShardReader> readers;
  std::string source;  // For messages.
};

struct SavedState {
  int64_t step = 0;
  // The files' sizes and headers, hashed (StateImport::SourceDigest).
  uint64_t digest = 0;
  // The optimizer kinds present (kParameters always is).
  std::set<Kind> kinds = {Kind::kParameters};
  std::map<std::pair<int, Kind>, SavedShards> shards;
};

// The new job as far as loading is concerned: its units laid out for its
// F, and its optimizer.
struct Target {
  std::vector<core::UnitLayout> units;
  core::OptimizerKind optimizer = core::OptimizerKind::kSgd;
};

// Folds `value` into a running 64-bit digest (FNV-1a over its bytes).
uint64_t Mix(uint64_t digest, uint64_t value) {
  if (digest == 0) digest = 0xcbf29ce484222325ull;
  for (int i = 0; i < 8; ++i) {
    digest ^= (value >> (8 * i)) & 0xffu;
    digest *= 0x100000001b3ull;
  }
  return digest;
}

absl::StatusOr<uint64_t> MixFile(uint64_t digest,
                                 const SafetensorsReader& reader) {
  absl::StatusOr<uint64_t> fingerprint = reader.SampledFingerprint();
  if (!fingerprint.ok()) return fingerprint.status();
  return Mix(digest, *fingerprint);
}

// As StepEngine::OptimizerStateKinds.
std::vector<Kind> OptimizerKinds(core::OptimizerKind optimizer) {
  switch (optimizer) {
    case core::OptimizerKind::kAdamW:
      return {Kind::kExpAvg, Kind::kExpAvgSq};
    case core::OptimizerKind::kSgdMomentum:
      return {Kind::kMomentum};
    case core::OptimizerKind::kSgd:
      break;
  }
  return {};
}

core::OptimizerKind OptimizerOf(const core::ModelConfig& model) {
  if (std::holds_alternative<core::AdamWOptions>(model.config.optimizer)) {
    return core::OptimizerKind::kAdamW;
  }
  return std::get<core::SgdOptions>(model.config.optimizer).momentum != 0.0
             ? core::OptimizerKind::kSgdMomentum
             : core::OptimizerKind::kSgd;
}

// The job's optimizer state kinds must be exactly the saved ones.
absl::Status CheckOptimizer(const SavedState& saved, const Target& target,
                            const std::string& source) {
  std::set<Kind> mine = {Kind::kParameters};
  for (Kind k : OptimizerKinds(target.optimizer)) mine.insert(k);
  if (saved.kinds.size() > 1 && saved.kinds != mine) {
    std::vector<std::string> a, b;
    for (Kind k : saved.kinds) a.push_back(KindName(k));
    for (Kind k : mine) b.push_back(KindName(k));
    return absl::FailedPreconditionError(absl::StrCat(
        source, ": holds optimizer state [", absl::StrJoin(a, ","),
        "] but this job's optimizer (", OptimizerName(target.optimizer),
        ") keeps [", absl::StrJoin(b, ","), "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MetadataInt(const SafetensorsReader& reader,
                                    absl::string_view key) {
  absl::StatusOr<std::string> text = reader.Metadata(key);
  if (!text.ok()) return text.status();
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::DataLossError(absl::StrCat(reader.path(), ": __metadata__ '",
                                            key, "' is not an integer: '",
                                            *text, "'"));
  }
  return value;
}

// A file of our own exports with optimizer state: its optimizer must be
// this job's, and its kinds are the job's.
absl::Status AddOptimizerKinds(const SafetensorsReader& reader,
                               const Target& target, SavedState& saved) {
  auto optimizer = reader.metadata().find("optimizer");
  if (optimizer == reader.metadata().end()) return absl::OkStatus();
  const char* mine = OptimizerName(target.optimizer);
  if (optimizer->second != mine) {
    return absl::FailedPreconditionError(
        absl::StrCat(reader.path(), ": holds ", optimizer->second,
                     " state but this job's optimizer is ", mine));
  }
  for (Kind k : OptimizerKinds(target.optimizer)) saved.kinds.insert(k);
  absl::StatusOr<int64_t> step = MetadataInt(reader, "optimizer_step");
  if (!step.ok()) return step.status();
  saved.step = *step;
  return absl::OkStatus();
}

// A safetensors file by tensor name: "<unit>.<tensor>" (PyTorch / Hugging
// Face, our FULL export), "<unit>.<tensor>.exp_avg" ... for our FULL
// export's optimizer state. Each tensor is one saved "shard" of its unit.
absl::StatusOr<SavedState> FromNamedFile(const std::string& path,
                                         const Target& target) {
  absl::StatusOr<SafetensorsReader> opened = SafetensorsReader::Open(path);
  if (!opened.ok()) return opened.status();
  auto reader = std::make_shared<SafetensorsReader>(*std::move(opened));
  SavedState saved;
  absl::StatusOr<uint64_t> digest = MixFile(0, *reader);
  if (!digest.ok()) return digest.status();
  saved.digest = *digest;
  if (absl::Status s = AddOptimizerKinds(*reader, target, saved); !s.ok()) {
    return s;
  }
  const std::vector<core::UnitLayout>& units = target.units;
  for (size_t u = 0; u < units.size(); ++u) {
    for (Kind kind : saved.kinds) {
      SavedShards& shards = saved.shards[{static_cast<int>(u), kind}];
      shards.source = path;
      for (const core::TensorView& t : units[u].tensors()) {
        std::string name = absl::StrCat(units[u].name(), ".", t.name);
        if (kind != Kind::kParameters)
          absl::StrAppend(&name, ".", KindName(kind));
        absl::StatusOr<const SafetensorsTensor*> tensor =
            reader->Expect(name, t.shape);
        if (!tensor.ok()) return tensor.status();
        shards.ranges.push_back(core::ShardRange{t.offset, t.numel, 0});
        shards.readers.push_back([reader, tensor = *tensor](int64_t offset,
                                                            int64_t count,
                                                            float* out) {
          return reader->ReadFloats(*tensor, offset, count, out);
        });
      }
    }
  }
  return saved;
}

// Our SHARDED export: DIR/rank-<R>.safetensors, each holding its shard of
// every unit ("<unit>.master", "<unit>.exp_avg", ...) with the shard's flat
// range in the metadata. The files of ranks 0..F-1 hold every shard.
absl::StatusOr<SavedState> FromShardedExport(const std::string& dir,
                                             const Target& target) {
  std::vector<std::shared_ptr<SafetensorsReader>> readers;
  absl::StatusOr<SafetensorsReader> first =
      SafetensorsReader::Open(absl::StrCat(dir, "/rank-0.safetensors"));
  if (!first.ok()) return first.status();
  readers.push_back(std::make_shared<SafetensorsReader>(*std::move(first)));
  absl::StatusOr<int64_t> factor = MetadataInt(*readers[0], "sharding_factor");
  if (!factor.ok()) return factor.status();
  if (*factor < 1) {
    return absl::DataLossError(
        absl::StrCat(readers[0]->path(), ": sharding_factor ", *factor));
  }
  for (int64_t i = 1; i < *factor; ++i) {
    absl::StatusOr<SafetensorsReader> r =
        SafetensorsReader::Open(absl::StrCat(dir, "/rank-", i, ".safetensors"));
    if (!r.ok()) return r.status();
    readers.push_back(std::make_shared<SafetensorsReader>(*std::move(r)));
  }
  SavedState saved;
  if (absl::Status s = AddOptimizerKinds(*readers[0], target, saved); !s.ok()) {
    return s;
  }
  absl::StatusOr<int64_t> step = MetadataInt(*readers[0], "step");
  if (!step.ok()) return step.status();
  for (const auto& reader : readers) {
    absl::StatusOr<int64_t> theirs = MetadataInt(*reader, "step");
    if (!theirs.ok()) return theirs.status();
    if (*theirs != *step) {
      return absl::FailedPreconditionError(absl::StrCat(
          reader->path(), ": holds step ", *theirs, " but ", readers[0]->path(),
          " step ", *step, " (files of two exports)"));
    }
  }
  saved.step = *step;
  if (saved.kinds.size() == 1) saved.step = 0;  // Parameters only.
  for (const auto& reader : readers) {
    absl::StatusOr<uint64_t> digest = MixFile(saved.digest, *reader);
    if (!digest.ok()) return digest.status();
    saved.digest = *digest;
  }
  const std::vector<core::UnitLayout>& units = target.units;
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string& name = units[u].name();
    for (Kind kind : saved.kinds) {
      SavedShards& shards = saved.shards[{static_cast<int>(u), kind}];
      shards.source = dir;
      for (const auto& reader : readers) {
        absl::StatusOr<int64_t> offset =
            MetadataInt(*reader, absl::StrCat(name, ".shard_offset"));
        absl::StatusOr<int64_t> numel =
            MetadataInt(*reader, absl::StrCat(name, ".shard_numel"));
        absl::StatusOr<int64_t> unit_numel =
            MetadataInt(*reader, absl::StrCat(name, ".unit_numel"));
        for (const auto* s : {&offset, &numel, &unit_numel}) {
          if (!s->ok()) return s->status();
        }
        if (*unit_numel != units[u].numel()) {
          return absl::FailedPreconditionError(absl::StrCat(
              reader->path(), ": unit '", name, "' has ", *unit_numel,
              " elements, this model's has ", units[u].numel()));
        }
        absl::StatusOr<const SafetensorsTensor*> tensor =
            reader->Expect(absl::StrCat(name, ".", KindName(kind)), {*numel});
        if (!tensor.ok()) return tensor.status();
        shards.ranges.push_back(core::ShardRange{*offset, *numel, 0});
        shards.readers.push_back(
            [reader, tensor = *tensor](int64_t off, int64_t count, float* out) {
              return reader->ReadFloats(*tensor, off, count, out);
            });
      }
    }
  }
  return saved;
}

// An open checkpoint file, shared by the readers of its sections.
class OpenFile {
 public:
  static absl::StatusOr<std::shared_ptr<OpenFile>> Open(std::string path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
    }
    return std::shared_ptr<OpenFile>(new OpenFile(std::move(path), fd));
  }
  ~OpenFile() { close(fd_); }
  absl::Status Read(int64_t at, int64_t bytes, void* out) const {
    char* p = static_cast<char*>(out);
    for (int64_t done = 0; done < bytes;) {
      const ssize_t n = pread(fd_, p + done, bytes - done, at + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
      }
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(path_, ": truncated"));
      }
      done += n;
    }
    return absl::OkStatus();
  }
  const std::string& path() const { return path_; }

 private:
  OpenFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// The layouts of the saved model must have the same units and tensors
// (names and shapes) as this job's: then flat coordinates coincide.
absl::Status CheckSameUnits(const std::vector<core::UnitLayout>& saved,
                            const std::vector<core::UnitLayout>& mine,
                            const std::string& source) {
  if (saved.size() != mine.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": holds a model of ", saved.size(),
                     " units, this one has ", mine.size()));
  }
  for (size_t u = 0; u < saved.size(); ++u) {
    const auto& a = saved[u].tensors();
    const auto& b = mine[u].tensors();
    bool same = saved[u].name() == mine[u].name() && a.size() == b.size();
    for (size_t t = 0; same && t < a.size(); ++t) {
      same = a[t].name == b[t].name && a[t].shape == b[t].shape;
    }
    if (!same) {
      return absl::FailedPreconditionError(absl::StrCat(
          source, ": holds another model: unit ", u, " ('", saved[u].name(),
          "') differs from this model's ('", mine[u].name(), "')"));
    }
  }
  return absl::OkStatus();
}

// Our sharded checkpoints: the latest step every old rank holds intact;
// the files of ranks 0..F_old-1 (shard index = rank) hold every shard.
absl::StatusOr<SavedState> FromCheckpoints(const std::string& dir,
                                           const Target& target) {
  std::vector<std::string> problems;
  absl::StatusOr<ResumePoint> point =
      ResumePointChooser::ChooseFromDirectory(dir, &problems);
  for (const std::string& p : problems) {
    std::fprintf(stderr, "shardd: resume: ignoring checkpoint: %s\n",
                 p.c_str());
  }
  if (!point.ok()) return point.status();
  std::vector<v1::ShardHeader> headers;
  int64_t factor = 0;
  for (int r = 0; r < point->world_size; ++r) {
    absl::StatusOr<v1::ShardHeader> h = recovery::ReadShardCheckpointHeader(
        recovery::ShardCheckpointPath(dir, r, point->step));
    if (!h.ok()) return h.status();
    factor = std::max<int64_t>(factor, h->shard_index() + 1);
    headers.push_back(*std::move(h));
  }
  for (int r = 0; r < point->world_size; ++r) {
    if (headers[r].shard_index() != r % factor) {
      return absl::DataLossError(
          absl::StrCat(recovery::ShardCheckpointPath(dir, r, point->step),
                       ": shard index ", headers[r].shard_index(),
                       " does not fit F = ", factor, " (rank ", r, ")"));
    }
  }
  const std::string first = recovery::ShardCheckpointPath(dir, 0, point->step);
  absl::StatusOr<core::ModelConfig> model =
      node::ProtoConvert::ModelFromProto(headers[0].model());
  if (!model.ok()) {
    return absl::DataLossError(
        absl::StrCat(first, ": its model: ", model.status().message()));
  }
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(*model, factor);
  if (!layouts.ok()) {
    return absl::DataLossError(
        absl::StrCat(first, ": its layout: ", layouts.status().message()));
  }
  if (absl::Status s = CheckSameUnits(*layouts, target.units, first); !s.ok()) {
    return s;
  }
  SavedState saved;
  saved.step = headers[0].step();
  for (const v1::ShardHeader& h : headers) {
    const std::string bytes = h.SerializeAsString();
    saved.digest = Mix(saved.digest, bytes.size());
    saved.digest = Mix(saved.digest, core::Crc32c(bytes.data(), bytes.size()));
  }
  for (int64_t i = 0; i < factor; ++i) {
    const std::string path =
        recovery::ShardCheckpointPath(dir, static_cast<int>(i), point->step);
    absl::StatusOr<std::shared_ptr<OpenFile>> file = OpenFile::Open(path);
    if (!file.ok()) return file.status();
    // Magic (8), header length (8), header, payload.
    uint64_t header_bytes = 0;
    unsigned char le[8];
    if (absl::Status s = (*file)->Read(8, 8, le); !s.ok()) return s;
    for (int b = 7; b >= 0; --b) header_bytes = (header_bytes << 8) | le[b];
    const int64_t payload = 16 + static_cast<int64_t>(header_bytes);
    for (const v1::ShardSection& section : headers[i].sections()) {
      absl::StatusOr<Kind> kind = KindFromSection(section.kind());
      if (!kind.ok()) {
        return absl::DataLossError(
            absl::StrCat(path, ": ", kind.status().message()));
      }
      if (section.unit() < 0 ||
          section.unit() >= static_cast<int>(layouts->size())) {
        return absl::DataLossError(
            absl::StrCat(path, ": section of unit ", section.unit()));
      }
      const core::ShardRange& range = (*layouts)[section.unit()].shard(i);
      if (section.byte_length() <
          range.numel * static_cast<int64_t>(sizeof(float))) {
        return absl::DataLossError(
            absl::StrCat(path, ": unit ", section.unit(), " ", KindName(*kind),
                         ": ", section.byte_length(), " bytes, the shard has ",
                         range.numel, " elements"));
      }
      saved.kinds.insert(*kind);
      SavedShards& shards = saved.shards[{section.unit(), *kind}];
      shards.source = dir;
      if (shards.ranges.size() != static_cast<size_t>(i)) {
        return absl::DataLossError(absl::StrCat(
            path, ": unit ", section.unit(), " ", KindName(*kind),
            " appears twice or is missing from a lower shard's file"));
      }
      shards.ranges.push_back(range);
      const int64_t at = payload + section.stream_offset();
      shards.readers.push_back(
          [file = *file, at](int64_t offset, int64_t count, float* out) {
            return file->Read(at + offset * 4, count * 4, out);
          });
    }
  }
  return saved;
}

absl::Status Overwrite(const SavedState& saved, node::StepEngine& engine,
                       ShardFiller& filler) {
  const node::EngineConfig& config = engine.config();
  const int64_t index = config.rank % config.plan.sharding_factor();
  for (const node::StepEngine::StateSection& section : engine.StateSections()) {
    if (saved.kinds.count(section.kind) == 0) continue;  // Stays zero.
    auto it = saved.shards.find({section.unit, section.kind});
    if (it == saved.shards.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the saved state has no ", KindName(section.kind),
                       " of unit ", section.unit));
    }
    const core::ShardRange& dest = config.units[section.unit].shard(index);
    absl::StatusOr<std::vector<RangePiece>> pieces =
        ReshardMap::Map(it->second.ranges, dest);
    if (!pieces.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          it->second.source, ": unit '", config.units[section.unit].name(),
          "' ", KindName(section.kind), ": ", pieces.status().message()));
    }
    // Straight into the section on the host; through one bounded staging
    // buffer, reused, on a device. What no piece covers (padding) is
    // zeroed.
    std::vector<ShardFiller::Piece> fill;
    fill.reserve(pieces->size());
    for (const RangePiece& p : *pieces) {
      const ShardReader& read = it->second.readers[p.source_shard];
      fill.push_back(
          ShardFiller::Piece{p.dest_offset, p.numel,
                             [&read, from = p.source_offset](
                                 int64_t done, int64_t count, float* out) {
                               return read(from + done, count, out);
                             }});
    }
    if (absl::Status s = filler.Fill(section.data, section.numel,
                                     std::move(fill), /*zero_rest=*/true);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// TensorInit.file of one tensor, planned: its file and its entry there.
struct TensorFromFile {
  int unit = 0;
  int tensor = 0;
  std::shared_ptr<const SafetensorsReader> reader;
  const SafetensorsTensor* entry = nullptr;
};

// The tensors' elements in this rank's shard, over the parameters their
// init values put there.
absl::Status OverwriteTensors(const std::vector<TensorFromFile>& files,
                              node::StepEngine& engine, ShardFiller& filler) {
  const node::EngineConfig& config = engine.config();
  const int64_t index = config.rank % config.plan.sharding_factor();
  const std::vector<node::StepEngine::StateSection> sections =
      engine.StateSections();
  for (const TensorFromFile& f : files) {
    const core::UnitLayout& unit = config.units[f.unit];
    const core::TensorView& view = unit.tensors()[f.tensor];
    const core::ShardRange& dest = unit.shard(index);
    const int64_t lo = std::max(dest.offset, view.offset);
    const int64_t hi = std::min(dest.end(), view.offset + view.numel);
    if (lo >= hi) continue;
    for (const node::StepEngine::StateSection& section : sections) {
      if (section.unit != f.unit || section.kind != Kind::kParameters) continue;
      // Only this tensor's elements: the rest of the shard keeps what the
      // other tensors' inits put there.
      std::vector<ShardFiller::Piece> fill = {ShardFiller::Piece{
          lo - dest.offset, hi - lo,
          [&f, from = lo - view.offset](int64_t done, int64_t count,
                                        float* out) {
            return f.reader->ReadFloats(*f.entry, from + done, count, out);
          }}};
      if (absl::Status s = filler.Fill(section.data, section.numel,
                                       std::move(fill), /*zero_rest=*/false);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

absl::StatusOr<ImportSources> ImportSources::FromRequest(
    const v1::RegisterModelRequest& request, const std::string& resume_flag) {
  ImportSources out;
  out.load_from = request.load_from();
  out.resume_from = request.resume_from();
  if (!out.load_from.empty() && !out.resume_from.empty()) {
    return absl::InvalidArgumentError(
        "load_from, resume_from: name at most one of them");
  }
  if (out.load_from.empty() && out.resume_from.empty()) {
    out.resume_from = resume_flag;
  }
  for (const auto& [field, path] :
       {std::pair<const char*, const std::string*>{"load_from", &out.load_from},
        {"resume_from", &out.resume_from}}) {
    if (!path->empty() && (*path)[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be absolute, got '", *path, "'"));
    }
  }
  for (int u = 0; u < request.model().units_size(); ++u) {
    const v1::UnitSpec& unit = request.model().units(u);
    for (int t = 0; t < unit.tensors_size(); ++t) {
      if (!unit.tensors(t).init().has_file()) continue;
      const v1::FileInit& file = unit.tensors(t).init().file();
      if (file.path().empty() || file.path()[0] != '/') {
        return absl::InvalidArgumentError(
            absl::StrCat("model.units[", u, "].tensors[", t,
                         "].init.file.path: must be an absolute path, got '",
                         file.path(), "'"));
      }
      out.tensor_files.push_back(TensorFile{u, t, file.path(), file.tensor()});
    }
  }
  return out;
}

struct StateImport::Saved {
  SavedState state;
  v1::StateSourceDigest source;
};

struct StateImport::Tensors {
  std::vector<TensorFromFile> files;
};

absl::StatusOr<StateImport> StateImport::Plan(
    const v1::RegisterModelRequest& request, const std::string& resume_flag,
    const core::ModelConfig& model, int64_t sharding_factor) {
  absl::StatusOr<ImportSources> sources =
      ImportSources::FromRequest(request, resume_flag);
  if (!sources.ok()) return sources.status();
  return Plan(*sources, model, sharding_factor);
}

absl::StatusOr<StateImport> StateImport::Plan(const ImportSources& sources,
                                              const core::ModelConfig& model,
                                              int64_t sharding_factor) {
  StateImport plan;
  if (sources.empty()) return plan;
  Target target;
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(model, sharding_factor);
  if (!layouts.ok()) return layouts.status();
  target.units = *std::move(layouts);
  target.optimizer = OptimizerOf(model);
  if (!sources.load_from.empty() || !sources.resume_from.empty()) {
    absl::StatusOr<SavedState> saved =
        !sources.resume_from.empty()
            ? FromCheckpoints(sources.resume_from, target)
        : IsDirectory(sources.load_from)
            ? FromShardedExport(sources.load_from, target)
            : FromNamedFile(sources.load_from, target);
    if (!saved.ok()) return saved.status();
    const std::string& source =
        sources.resume_from.empty() ? sources.load_from : sources.resume_from;
    if (absl::Status s = CheckOptimizer(*saved, target, source); !s.ok()) {
      return s;
    }
    v1::StateSourceDigest digest;
    digest.set_field(sources.resume_from.empty() ? "load_from" : "resume_from");
    digest.set_path(source);
    digest.set_step(saved->step);
    digest.set_digest(saved->digest);
    plan.saved_ =
        std::make_shared<Saved>(Saved{*std::move(saved), std::move(digest)});
  }
  if (!sources.tensor_files.empty()) {
    auto tensors = std::make_shared<Tensors>();
    std::map<std::string, std::shared_ptr<const SafetensorsReader>> readers;
    for (const ImportSources::TensorFile& f : sources.tensor_files) {
      auto& reader = readers[f.path];
      if (reader == nullptr) {
        absl::StatusOr<SafetensorsReader> opened =
            SafetensorsReader::Open(f.path);
        if (!opened.ok()) return opened.status();
        reader = std::make_shared<const SafetensorsReader>(*std::move(opened));
      }
      const core::UnitLayout& unit = target.units[f.unit];
      const core::TensorView& view = unit.tensors()[f.tensor];
      const std::string name =
          f.name.empty() ? absl::StrCat(unit.name(), ".", view.name) : f.name;
      absl::StatusOr<const SafetensorsTensor*> entry =
          reader->Expect(name, view.shape);
      if (!entry.ok()) return entry.status();
      tensors->files.push_back(
          TensorFromFile{f.unit, f.tensor, reader, *entry});
    }
    plan.tensors_ = std::move(tensors);
  }
  return plan;
}

const v1::StateSourceDigest& StateImport::source_digest() const {
  return saved_ == nullptr ? v1::StateSourceDigest::default_instance()
                           : saved_->source;
}

absl::StatusOr<int64_t> StateImport::Apply(node::StepEngine& engine) const {
  if (empty()) return engine.committed_step();
  int64_t step = 0;
  ShardFiller filler(engine.math());
  if (saved_ != nullptr) {
    if (absl::Status s = Overwrite(saved_->state, engine, filler); !s.ok()) {
      return s;
    }
    step = saved_->state.step;
  }
  if (tensors_ != nullptr) {
    if (absl::Status s = OverwriteTensors(tensors_->files, engine, filler);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = engine.InstallState(step); !s.ok()) return s;
  return step;
}

}  // namespace shardd::state
