#ifndef SHARDD_CLIENT_ADMISSION_REFUSAL_H_
#define SHARDD_CLIENT_ADMISSION_REFUSAL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shardd::client {

// A daemon's memory-admission refusal (RESOURCE_EXHAUSTED "...: the plan
// does not fit in memory: it needs ...; .... Plan: ...; host H (of it shm
// S), device D. Limits: ...; ...", trainer.proto) laid out for a terminal: the
// request, each scope that does not fit, the plan's categories and the
// limits, one per line, indented. Any other message comes back unchanged.
// Pure; thread-safe.
std::string FormatAdmissionRefusal(absl::string_view message);

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_ADMISSION_REFUSAL_H_
