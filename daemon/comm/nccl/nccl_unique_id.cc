#include "daemon/comm/nccl/nccl_unique_id.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/core/rendezvous_key.h"

namespace shardd::comm::nccl {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::Status WithKey(const absl::Status& status, absl::string_view key) {
  return absl::Status(status.code(), absl::StrCat("nccl unique id '", key,
                                                  "': ", status.message()));
}

}  // namespace

std::string NcclUniqueIdKey(int owner, int64_t epoch, absl::string_view group) {
  return core::NcclIdKey(owner, epoch, group);
}

absl::Status ValidateGroupName(absl::string_view group) {
  if (group.empty()) {
    return absl::InvalidArgumentError("group must not be empty");
  }
  for (size_t i = 0; i < group.size(); ++i) {
    const char c = group[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group '", group, "' has character ", i, " outside [A-Za-z0-9_.-]"));
    }
  }
  return absl::OkStatus();
}

std::string EncodeNcclUniqueId(const NcclUniqueIdBytes& id) {
  std::string out(2 * id.size(), '0');
  for (size_t i = 0; i < id.size(); ++i) {
    out[2 * i] = kHexDigits[id[i] >> 4];
    out[2 * i + 1] = kHexDigits[id[i] & 0xf];
  }
  return out;
}

absl::StatusOr<NcclUniqueIdBytes> DecodeNcclUniqueId(absl::string_view value) {
  NcclUniqueIdBytes id;
  if (value.size() != 2 * id.size()) {
    return absl::DataLossError(absl::StrCat("expected ", 2 * id.size(),
                                            " hex digits, got ", value.size(),
                                            " characters"));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const int hi = HexValue(value[2 * i]);
    const int lo = HexValue(value[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::DataLossError(absl::StrCat(
          "character ", hi < 0 ? 2 * i : 2 * i + 1, " is not a hex digit"));
    }
    id[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return id;
}

absl::StatusOr<NcclUniqueIdBytes> ExchangeNcclUniqueId(
    Store& store, const UniqueIdExchange& exchange,
    const std::function<absl::StatusOr<NcclUniqueIdBytes>()>& create) {
  if (absl::Status s = ValidateGroupName(exchange.group); !s.ok()) return s;
  if (exchange.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be >= 0, got ", exchange.rank));
  }
  if (exchange.root_job_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "root_job_rank must be >= 0, got ", exchange.root_job_rank));
  }
  const std::string key =
      NcclUniqueIdKey(exchange.root_job_rank, exchange.epoch, exchange.group);
  if (exchange.rank == 0) {
    absl::StatusOr<NcclUniqueIdBytes> id = create();
    if (!id.ok()) return WithKey(id.status(), key);
    if (absl::Status s = store.Set(key, EncodeNcclUniqueId(*id)); !s.ok()) {
      return WithKey(s, key);
    }
    return id;
  }
  if (absl::Status s = store.Wait({key}, exchange.timeout); !s.ok()) {
    return WithKey(s, key);
  }
  absl::StatusOr<std::string> value = store.Get(key);
  if (!value.ok()) return WithKey(value.status(), key);
  absl::StatusOr<NcclUniqueIdBytes> id = DecodeNcclUniqueId(*value);
  if (!id.ok()) return WithKey(id.status(), key);
  return id;
}

}  // namespace shardd::comm::nccl
