#include "daemon/comm/status_exception.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardd::comm {

StatusException::StatusException(absl::Status status)
    : std::runtime_error(status.ToString()), status_(std::move(status)) {}

absl::Status StatusFromException(std::exception_ptr error,
                                 absl::string_view what) {
  try {
    std::rethrow_exception(error);
  } catch (const StatusException& e) {
    return e.status();
  } catch (const std::exception& e) {
    const std::string message = absl::AsciiStrToLower(e.what());
    if (absl::StrContains(message, "timed out") ||
        absl::StrContains(message, "timeout")) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " timed out: ", e.what()));
    }
    return absl::UnavailableError(absl::StrCat(what, " failed: ", e.what()));
  } catch (...) {
    return absl::UnavailableError(
        absl::StrCat(what, " failed with an unknown exception"));
  }
}

}  // namespace shardd::comm
