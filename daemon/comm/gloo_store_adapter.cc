#include "daemon/comm/gloo_store_adapter.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/comm/status_exception.h"
#include "daemon/core/rendezvous_key.h"

namespace shardd::comm {

GlooStoreAdapter::GlooStoreAdapter(shardd::comm::Store& store, int64_t epoch,
                                   std::string group,
                                   std::vector<int> job_ranks,
                                   MonoTime deadline)
    : store_(store),
      epoch_(epoch),
      group_(std::move(group)),
      job_ranks_(std::move(job_ranks)),
      deadline_(deadline) {}

absl::StatusOr<int> GlooStoreAdapter::GlooKeyWriter(absl::string_view key) {
  absl::string_view rest = key;
  absl::ConsumePrefix(&rest, "rank_");
  size_t digits = 0;
  while (digits < rest.size() && digits < 9 && rest[digits] >= '0' &&
         rest[digits] <= '9') {
    ++digits;
  }
  int writer = 0;
  if (digits == 0 || (digits < rest.size() && rest[digits] != '/') ||
      !absl::SimpleAtoi(rest.substr(0, digits), &writer)) {
    return absl::InternalError(absl::StrCat(
        "gloo rendezvous key '", key,
        "' does not start with its writer's rank: this Gloo writes keys the "
        "store adapter does not know"));
  }
  return writer;
}

absl::StatusOr<std::string> GlooStoreAdapter::StoreKey(
    absl::string_view key) const {
  absl::StatusOr<int> writer = GlooKeyWriter(key);
  if (!writer.ok()) return writer.status();
  int owner = *writer;
  if (!job_ranks_.empty()) {
    if (*writer >= static_cast<int>(job_ranks_.size())) {
      return absl::InternalError(
          absl::StrCat("gloo rendezvous key '", key, "' names rank ", *writer,
                       " of a group of ", job_ranks_.size()));
    }
    owner = job_ranks_[*writer];
  }
  return absl::StrCat(core::GlooKeyPrefix(owner, epoch_, group_), key);
}

std::string GlooStoreAdapter::StoreKeyOrThrow(absl::string_view key) const {
  absl::StatusOr<std::string> stored = StoreKey(key);
  if (!stored.ok()) throw StatusException(stored.status());
  return *std::move(stored);
}

void GlooStoreAdapter::set(const std::string& key,
                           const std::vector<char>& data) {
  absl::Status status = store_.Set(StoreKeyOrThrow(key),
                                   absl::string_view(data.data(), data.size()));
  if (!status.ok()) throw StatusException(std::move(status));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  // Gloo's get blocks until the key is set (its own stores wait inside
  // get, and its rendezvous reads keys it never waited for).
  wait({key});
  absl::StatusOr<std::string> value = store_.Get(StoreKeyOrThrow(key));
  if (!value.ok()) throw StatusException(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> stored;
  stored.reserve(keys.size());
  for (const std::string& key : keys) stored.push_back(StoreKeyOrThrow(key));
  const absl::Duration left =
      std::max(deadline_ - MonoNow(), absl::ZeroDuration());
  absl::Status status = store_.Wait(stored, left);
  if (!status.ok()) throw StatusException(std::move(status));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& /*timeout*/) {
  // Gloo passes its context timeout; the connect deadline governs instead.
  wait(keys);
}

}  // namespace shardd::comm
