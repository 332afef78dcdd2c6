#ifndef SHARDD_DAEMON_COMM_NCCL_TEST_STORES_H_
#define SHARDD_DAEMON_COMM_NCCL_TEST_STORES_H_

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/comm/store.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/mono_time.h"

// Stores for the tests of this package only (the project's InMemoryStore and
// FileStore belong to the Gloo backend's package, which this one does not
// depend on).
namespace shardd::comm::nccl::testing {

// Map-backed, for ranks that are threads of one process. Thread-safe.
class MapStore : public Store {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    absl::MutexLock lock(&mu_);
    if (!set_error_.ok()) return set_error_;
    values_[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(absl::string_view key) override {
    absl::MutexLock lock(&mu_);
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return absl::NotFoundError(key);
    return it->second;
  }
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override {
    const MonoTime deadline = MonoNow() + timeout;
    absl::MutexLock lock(&mu_);
    for (const std::string& key : keys) {
      auto set = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return values_.count(key) > 0;
      };
      if (!AwaitUntil(&mu_, absl::Condition(&set), deadline)) {
        return absl::DeadlineExceededError(key);
      }
    }
    return absl::OkStatus();
  }
  // Every later Set fails with `status`.
  void FailSets(absl::Status status) {
    absl::MutexLock lock(&mu_);
    set_error_ = status;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  absl::Status set_error_ ABSL_GUARDED_BY(mu_);
};

// One file per key in a directory, for ranks that are processes. Set writes
// a temporary file and renames it, so a reader sees all of a value or none.
class DirStore : public Store {
 public:
  explicit DirStore(std::string dir) : dir_(std::move(dir)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    const std::string path = Path(key);
    const std::string tmp = absl::StrCat(path, ".tmp");
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!out) return absl::UnavailableError(absl::StrCat("write ", tmp));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::UnavailableError(absl::StrCat("rename ", tmp));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(absl::string_view key) override {
    std::ifstream in(Path(key), std::ios::binary);
    if (!in) return absl::NotFoundError(key);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override {
    const MonoTime deadline = MonoNow() + timeout;
    for (const std::string& key : keys) {
      while (!std::ifstream(Path(key))) {
        if (MonoNow() >= deadline) return absl::DeadlineExceededError(key);
        absl::SleepFor(absl::Milliseconds(2));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string Path(absl::string_view key) const {
    return absl::StrCat(dir_, "/", absl::StrReplaceAll(key, {{"/", "_"}}));
  }

  std::string dir_;
};

}  // namespace shardd::comm::nccl::testing

#endif  // SHARDD_DAEMON_COMM_NCCL_TEST_STORES_H_
