#include "daemon/coordinator/rendezvous_store.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"

namespace shardd::coordinator {

void RendezvousStore::AdvanceEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch <= epoch_) return;
  epoch_ = epoch;
  values_.clear();
}

int64_t RendezvousStore::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void RendezvousStore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

absl::Status RendezvousStore::CheckEpoch(int64_t epoch) const {
  if (shutdown_)
    return absl::CancelledError("the coordinator is shutting down");
  if (epoch < epoch_) {
    return absl::AbortedError(absl::StrCat(
        "epoch ", epoch, " is stale (current epoch ", epoch_, ")"));
  }
  if (epoch > epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch ", epoch, " has not begun (current epoch ", epoch_, ")"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(int64_t epoch, absl::string_view key,
                                  absl::string_view value, bool if_absent,
                                  bool replace) {
  if (key.empty() || key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key must be 1..", limits_.max_key_bytes, " bytes, got ", key.size()));
  }
  if (value.size() > limits_.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value must be at most ", limits_.max_value_bytes,
                     " bytes, got ", value.size()));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckEpoch(epoch); !s.ok()) return s;
  auto it = values_.find(key);
  if (it != values_.end()) {
    if (if_absent) {
      return absl::AlreadyExistsError(absl::StrCat("key \"", key, "\" is set"));
    }
    // Write-once unless `replace`: the same value again is a retried call;
    // any other value would change what members already read.
    if (it->second == value) return absl::OkStatus();
    if (replace) {
      it->second = std::string(value);
      return absl::OkStatus();
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "key \"", key, "\" is already set in epoch ", epoch_,
        " with another value (rule: a key, once written in an epoch, keeps "
        "its value)"));
  }
  if (values_.size() >= limits_.max_keys_per_epoch) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "epoch ", epoch_, " already holds ", values_.size(), " keys"));
  }
  values_.emplace(std::string(key), std::string(value));
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::Get(int64_t epoch,
                                                 absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckEpoch(epoch); !s.ok()) return s;
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key \"", key, "\" is not set in epoch ", epoch));
  }
  return it->second;
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Wait(
    int64_t epoch, const std::vector<std::string>& keys, MonoTime deadline) {
  if (keys.empty()) return absl::InvalidArgumentError("keys must not be empty");
  for (const std::string& k : keys) {
    if (k.empty()) return absl::InvalidArgumentError("keys: empty key");
  }
  absl::MutexLock lock(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_ || epoch_ != epoch) return true;
    for (const std::string& k : keys) {
      if (!values_.contains(k)) return false;
    }
    return true;
  };
  AwaitUntil(&mu_, absl::Condition(&settled), deadline);
  if (absl::Status s = CheckEpoch(epoch); !s.ok()) return s;
  std::vector<std::string> out;
  std::string missing;
  for (const std::string& k : keys) {
    auto it = values_.find(k);
    if (it == values_.end()) {
      absl::StrAppend(&missing, missing.empty() ? "" : ", ", "\"", k, "\"");
    } else {
      out.push_back(it->second);
    }
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "keys not set in epoch ", epoch, " by the deadline: ", missing));
  }
  return out;
}

}  // namespace shardd::coordinator
