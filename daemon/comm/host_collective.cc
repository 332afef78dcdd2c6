#include "daemon/comm/host_collective.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/comm/host_identity.h"
#include "daemon/comm/peer_liveness.h"
#include "daemon/comm/queued_collective.h"
#include "daemon/comm/shm_rounds.h"
#include "daemon/comm/shm_segment.h"
#include "daemon/comm/shm_transport.h"
#include "daemon/core/mono_time.h"
#include "daemon/core/rendezvous_key.h"

namespace shardd::comm {
namespace {

constexpr int64_t kMinSlotBytes = int64_t{64} << 10;
constexpr int64_t kMaxSlotBytes = int64_t{256} << 20;

// Reads one key of every rank, once all are set.
class GroupKeys {
 public:
  GroupKeys(Store& store, const GlooCollectiveOptions& options,
            MonoTime deadline)
      : store_(store), options_(options), deadline_(deadline) {}

  std::string Key(int group_rank, absl::string_view what) const {
    const int owner = options_.job_ranks.empty()
                          ? group_rank
                          : options_.job_ranks[group_rank];
    return core::ShmKey(owner, options_.epoch, options_.group, what);
  }

  absl::Status SetMine(absl::string_view what, absl::string_view value) {
    return store_.Set(Key(options_.rank, what), value);
  }

  absl::StatusOr<std::string> GetOne(int group_rank, absl::string_view what) {
    const std::string key = Key(group_rank, what);
    if (absl::Status s = store_.Wait({key}, Left()); !s.ok()) return s;
    return store_.Get(key);
  }

  absl::StatusOr<std::vector<std::string>> GetAll(absl::string_view what) {
    std::vector<std::string> keys;
    for (int r = 0; r < options_.size; ++r) keys.push_back(Key(r, what));
    if (absl::Status s = store_.Wait(keys, Left()); !s.ok()) return s;
    std::vector<std::string> values;
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> value = store_.Get(key);
      if (!value.ok()) return value.status();
      values.push_back(*std::move(value));
    }
    return values;
  }

 private:
  absl::Duration Left() const {
    return std::max(deadline_ - MonoNow(), absl::ZeroDuration());
  }

  Store& store_;
  const GlooCollectiveOptions& options_;
  const MonoTime deadline_;
};

// "/sharddcoll-<pid>.e<E>-<group>-<random>" (kShmSegmentFamily), the
// group's characters outside [A-Za-z0-9_-] as '-'.
std::string SegmentName(const GlooCollectiveOptions& options) {
  std::string group = options.group.substr(0, 64);
  for (char& c : group) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_';
    if (!keep) c = '-';
  }
  std::random_device device;
  const uint64_t random =
      (static_cast<uint64_t>(device()) << 32) ^ device() ^ ::getpid();
  return absl::StrCat("/", kShmSegmentFamily, ::getpid(), ".e", options.epoch,
                      "-", group, "-", absl::Hex(random, absl::kZeroPad16));
}

absl::Status Describe(const GlooCollectiveOptions& options,
                      const absl::Status& status) {
  return absl::Status(
      status.code(),
      absl::StrCat("forming the shared-memory communicator of epoch ",
                   options.epoch, " group '", options.group, "' rank ",
                   options.rank, "/", options.size, ": ", status.message()));
}

// Rank 0 creates and initialises the segment and names it (or says why
// not: "!<reason>"); the others open it. Returns this rank's mapping, or
// why it has none.
absl::StatusOr<std::unique_ptr<ShmSegment>> MapSegment(
    const HostCollectiveOptions& options, GroupKeys& keys, int64_t bytes,
    std::string* name) {
  const GlooCollectiveOptions& g = options.gloo;
  if (g.rank == 0) {
    *name = SegmentName(g);
    absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
        ShmSegment::Create(*name, bytes);
    if (segment.ok()) {
      ShmRounds::Initialize((*segment)->data(), g.size, options.slot_bytes,
                            g.epoch);
    }
    const std::string published =
        segment.ok() ? *name : absl::StrCat("!", segment.status().message());
    if (absl::Status s = keys.SetMine("segment", published); !s.ok()) {
      return s;
    }
    if (!segment.ok()) name->clear();
    return segment;
  }
  absl::StatusOr<std::string> published = keys.GetOne(0, "segment");
  if (!published.ok()) return published.status();
  if (absl::string_view(*published).substr(0, 1) == "!") {
    return absl::UnavailableError(
        absl::StrCat("rank 0 could not create it: ", published->substr(1)));
  }
  *name = *published;
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      ShmSegment::Open(*name, bytes);
  if (!segment.ok()) return segment.status();
  if (absl::Status s = ShmRounds::Validate((*segment)->data(), g.size,
                                           options.slot_bytes, g.epoch);
      !s.ok()) {
    return s;
  }
  return segment;
}

absl::StatusOr<std::unique_ptr<Collective>> FormShm(
    const HostCollectiveOptions& options, Store& store, GroupKeys& keys,
    std::vector<pid_t> pids, HostTransport* chosen) {
  const GlooCollectiveOptions& g = options.gloo;
  // Gloo first: it carries Send and Recv, and it is the fallback every
  // rank can take if the segment does not work out.
  absl::StatusOr<std::unique_ptr<Collective>> inner =
      CreateGlooCollective(g, store);
  if (!inner.ok()) return inner.status();

  const int64_t bytes = ShmRounds::SegmentBytes(g.size, options.slot_bytes);
  std::string name;
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      MapSegment(options, keys, bytes, &name);
  // Whatever happens next, the name goes once every rank has answered (or
  // this rank gives up): a crash later leaves nothing in /dev/shm.
  absl::Cleanup unlink = [&name] {
    if (!name.empty()) ShmSegment::Unlink(name).IgnoreError();
  };
  std::string mapped = "ok";
  if (!segment.ok()) {
    if (segment.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return Describe(g, segment.status());
    }
    mapped = std::string(segment.status().message());
  } else if (options.refuse_mapping_for_testing) {
    mapped = "refused for testing";
    segment->reset();
  }
  if (mapped.empty()) mapped = "failed";
  if (absl::Status s = keys.SetMine("mapped", mapped); !s.ok()) {
    return Describe(g, s);
  }
  absl::StatusOr<std::vector<std::string>> all = keys.GetAll("mapped");
  if (!all.ok()) return Describe(g, all.status());
  std::move(unlink).Invoke();

  absl::StatusOr<HostTransport> transport =
      ChooseAfterMapping(options.transport, *all);
  if (!transport.ok()) return Describe(g, transport.status());
  if (chosen != nullptr) *chosen = *transport;
  if (*transport == HostTransport::kTcp) return inner;

  absl::StatusOr<std::unique_ptr<PeerLiveness>> liveness =
      PeerLiveness::Create(std::move(pids), g.rank);
  if (!liveness.ok()) return Describe(g, liveness.status());
  ShmTransport::Parts parts;
  parts.rank = g.rank;
  parts.size = g.size;
  parts.slot_bytes = options.slot_bytes;
  parts.segment = std::move(*segment);
  parts.liveness = std::move(*liveness);
  parts.inner = std::move(*inner);
  return std::make_unique<QueuedCollective>(
      CommunicatorIdentity(g, "shm"),
      std::make_unique<ShmTransport>(std::move(parts)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateHostCollective(
    const HostCollectiveOptions& options, Store& store, HostTransport* chosen) {
  const GlooCollectiveOptions& g = options.gloo;
  if (chosen != nullptr) *chosen = HostTransport::kTcp;
  if (options.transport == TransportMode::kTcp || g.size <= 1) {
    return CreateGlooCollective(g, store);
  }
  if (options.slot_bytes < kMinSlotBytes ||
      options.slot_bytes > kMaxSlotBytes || options.slot_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot_bytes must be a multiple of 4096 in [64 KiB, 256 MiB], got ",
        options.slot_bytes));
  }
  // Gloo's own checks (rank, size, job_ranks, timeouts) before any key.
  if (g.rank < 0 || g.rank >= g.size || g.group.empty() ||
      (!g.job_ranks.empty() &&
       static_cast<int>(g.job_ranks.size()) != g.size) ||
      g.connect_timeout <= absl::ZeroDuration()) {
    return CreateGlooCollective(g, store);  // Says which field is wrong.
  }
  const MonoTime deadline = MonoNow() + g.connect_timeout;
  GroupKeys keys(store, g, deadline);

  absl::StatusOr<HostIdentity> identity = ReadHostIdentity();
  const std::string mine =
      absl::StrCat(::getpid(), " ", identity.ok() ? identity->ToString() : "");
  if (absl::Status s = keys.SetMine("host", mine); !s.ok()) {
    return Describe(g, s);
  }
  absl::StatusOr<std::vector<std::string>> published = keys.GetAll("host");
  if (!published.ok()) return Describe(g, published.status());
  std::vector<std::string> identities;
  std::vector<pid_t> pids;
  for (const std::string& value : *published) {
    const size_t space = value.find(' ');
    int pid = 0;
    if (space == std::string::npos ||
        !absl::SimpleAtoi(value.substr(0, space), &pid)) {
      identities.push_back("");
      pids.push_back(0);
      continue;
    }
    identities.push_back(value.substr(space + 1));
    pids.push_back(pid);
  }
  absl::StatusOr<HostTransport> transport =
      ChooseHostTransport(options.transport, identities);
  if (!transport.ok()) return Describe(g, transport.status());
  if (*transport == HostTransport::kTcp) return CreateGlooCollective(g, store);
  return FormShm(options, store, keys, std::move(pids), chosen);
}

}  // namespace shardd::comm
