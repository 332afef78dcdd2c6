#include "daemon/comm/in_memory_store.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/mono_time.h"

namespace shardd::comm {

absl::Status InMemoryStore::Set(absl::string_view key,
                                absl::string_view value) {
  absl::MutexLock lock(&mu_);
  values_[std::string(key)] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(std::string(key));
  if (it == values_.end()) {
    return absl::NotFoundError(
        absl::StrCat("store key '", key, "' is not set"));
  }
  return it->second;
}

absl::Status InMemoryStore::Wait(const std::vector<std::string>& keys,
                                 absl::Duration timeout) {
  const MonoTime deadline = MonoNow() + timeout;
  absl::MutexLock lock(&mu_);
  auto first_missing = [&]() -> const std::string* {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return &key;
    }
    return nullptr;
  };
  // Set() changes values_ under mu_, so the await wakes on every change.
  auto all_set = [&]() { return first_missing() == nullptr; };
  AwaitUntil(&mu_, absl::Condition(&all_set), deadline);
  if (const std::string* missing = first_missing(); missing != nullptr) {
    return absl::DeadlineExceededError(
        absl::StrCat("store key '", *missing, "' was not set within ",
                     absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

}  // namespace shardd::comm
