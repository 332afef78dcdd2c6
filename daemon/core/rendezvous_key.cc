#include "daemon/core/rendezvous_key.h"

#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

constexpr char kGrammar[] =
    "rendezvous keys are <keyspace>/<owner rank>[/<rest>] with keyspace "
    "model, gloo, nccl, shm or export";

bool SegmentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

// Whether the keyspace takes a rest after the owner.
enum class Rest { kNone, kRequired };

bool KnownKeyspace(absl::string_view keyspace, Rest* rest) {
  if (keyspace == kModelKeyspace) {
    *rest = Rest::kNone;
    return true;
  }
  if (keyspace == kGlooKeyspace || keyspace == kNcclKeyspace ||
      keyspace == kShmKeyspace || keyspace == kExportKeyspace) {
    *rest = Rest::kRequired;
    return true;
  }
  return false;
}

absl::Status Malformed(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("key '", key, "': ", why, " (", kGrammar, ")"));
}

}  // namespace

absl::StatusOr<RendezvousKey> ParseRendezvousKey(absl::string_view key) {
  if (key.empty()) return Malformed(key, "empty");
  if (key.size() > kMaxRendezvousKeyBytes) {
    // Not echoed: it may be huge.
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes: at most ",
                     kMaxRendezvousKeyBytes, " (", kGrammar, ")"));
  }
  // Characters first: only a key made of them is echoed in messages.
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (c != '/' && !SegmentChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("key: character ", i, " (byte ",
                       static_cast<int>(static_cast<unsigned char>(c)),
                       ") is outside [A-Za-z0-9_.-/] (", kGrammar, ")"));
    }
  }
  if (key.front() == '/' || key.back() == '/' ||
      key.find("//") != absl::string_view::npos) {
    return Malformed(key, "empty segment");
  }
  const size_t first = key.find('/');
  if (first == absl::string_view::npos) {
    return Malformed(key, "no owner rank: no rank owns it");
  }
  const absl::string_view keyspace = key.substr(0, first);
  Rest rest_rule = Rest::kNone;
  if (!KnownKeyspace(keyspace, &rest_rule)) {
    return Malformed(key, absl::StrCat("unknown keyspace '", keyspace,
                                       "': no rank owns it"));
  }
  const absl::string_view after = key.substr(first + 1);
  const size_t second = after.find('/');
  const absl::string_view owner = after.substr(0, second);
  const absl::string_view rest = second == absl::string_view::npos
                                     ? absl::string_view()
                                     : after.substr(second + 1);
  // A canonical rank: 1 to 9 digits, no leading zero (so that every rank
  // has one spelling and every value fits an int).
  bool digits = !owner.empty() && owner.size() <= 9 &&
                (owner.size() == 1 || owner[0] != '0');
  int value = 0;
  for (char c : owner) {
    if (c < '0' || c > '9') {
      digits = false;
      break;
    }
    value = value * 10 + (c - '0');
  }
  if (!digits) {
    return Malformed(
        key, absl::StrCat("owner '", owner, "' is not a rank (0, 1, 2, ...)"));
  }
  if (rest_rule == Rest::kNone && !rest.empty()) {
    return Malformed(key, absl::StrCat("keyspace ", keyspace,
                                       " takes nothing after the rank"));
  }
  if (rest_rule == Rest::kRequired && rest.empty()) {
    return Malformed(key, absl::StrCat("keyspace ", keyspace,
                                       " needs a name after the rank"));
  }
  return RendezvousKey{std::string(keyspace), value, std::string(rest),
                       /*replaceable=*/keyspace == kModelKeyspace ||
                           keyspace == kExportKeyspace};
}

absl::StatusOr<int> RendezvousKeyOwner(absl::string_view key) {
  absl::StatusOr<RendezvousKey> parsed = ParseRendezvousKey(key);
  if (!parsed.ok()) return parsed.status();
  return parsed->owner;
}

std::string ModelKey(int rank) {
  return absl::StrCat(kModelKeyspace, "/", rank);
}

std::string ExportKey(int rank, absl::string_view name) {
  return absl::StrCat(kExportKeyspace, "/", rank, "/", name);
}

std::string GlooKeyPrefix(int owner, int64_t epoch, absl::string_view group) {
  return absl::StrCat(kGlooKeyspace, "/", owner, "/epoch/", epoch, "/", group,
                      "/");
}

std::string NcclIdKey(int owner, int64_t epoch, absl::string_view group) {
  return absl::StrCat(kNcclKeyspace, "/", owner, "/epoch/", epoch, "/", group,
                      "/id");
}

std::string ShmKey(int owner, int64_t epoch, absl::string_view group,
                   absl::string_view what) {
  return absl::StrCat(kShmKeyspace, "/", owner, "/epoch/", epoch, "/", group,
                      "/", what);
}

}  // namespace shardd::core
