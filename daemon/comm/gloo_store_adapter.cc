#include "daemon/comm/gloo_store_adapter.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/comm/status_exception.h"

namespace shardd::comm {

GlooStoreAdapter::GlooStoreAdapter(shardd::comm::Store& store,
                                   std::string prefix, MonoTime deadline)
    : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

std::string GlooStoreAdapter::Prefix(int64_t epoch, absl::string_view group) {
  return absl::StrCat("epoch/", epoch, "/", group, "/");
}

void GlooStoreAdapter::set(const std::string& key,
                           const std::vector<char>& data) {
  absl::Status status = store_.Set(absl::StrCat(prefix_, key),
                                   absl::string_view(data.data(), data.size()));
  if (!status.ok()) throw StatusException(std::move(status));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  // Gloo's get blocks until the key is set (its own stores wait inside
  // get, and its rendezvous reads keys it never waited for).
  wait({key});
  absl::StatusOr<std::string> value = store_.Get(absl::StrCat(prefix_, key));
  if (!value.ok()) throw StatusException(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) {
    prefixed.push_back(absl::StrCat(prefix_, key));
  }
  const absl::Duration left =
      std::max(deadline_ - MonoNow(), absl::ZeroDuration());
  absl::Status status = store_.Wait(prefixed, left);
  if (!status.ok()) throw StatusException(std::move(status));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& /*timeout*/) {
  // Gloo passes its context timeout; the connect deadline governs instead.
  wait(keys);
}

}  // namespace shardd::comm
