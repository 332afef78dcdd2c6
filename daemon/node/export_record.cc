#include "daemon/node/export_record.h"

#include <utility>

namespace shardd::node {

void ExportRecord::NoteOutcome(std::string outcome) {
  absl::MutexLock lock(&mu_);
  outcome_ = std::move(outcome);
}

std::string ExportRecord::outcome() const {
  absl::MutexLock lock(&mu_);
  return outcome_;
}

void ExportRecord::NoteUnresolved(Attempt attempt) {
  absl::MutexLock lock(&mu_);
  unresolved_ = std::move(attempt);
}

std::optional<ExportRecord::Attempt> ExportRecord::Unresolved(int64_t step) {
  absl::MutexLock lock(&mu_);
  if (unresolved_.has_value() && unresolved_->step != step) {
    unresolved_.reset();
  }
  return unresolved_;
}

void ExportRecord::ClearUnresolved() {
  absl::MutexLock lock(&mu_);
  unresolved_.reset();
}

void ExportRecord::NoteLearned(std::string outcome) {
  absl::MutexLock lock(&mu_);
  learned_ = std::move(outcome);
}

std::string ExportRecord::learned() const {
  absl::MutexLock lock(&mu_);
  return learned_;
}

void ExportRecord::NoteCommitted() {
  absl::MutexLock lock(&mu_);
  unresolved_.reset();
  learned_.clear();
}

}  // namespace shardd::node
