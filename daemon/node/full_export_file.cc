#include "daemon/node/full_export_file.h"

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/state/safetensors_reader.h"

namespace shardd::node {

bool FileHoldsFullExport(const v1::ExportStateRequest& request, int64_t step) {
  // Open checks the whole header against the file's size: a file cut short
  // is not taken for a written one.
  absl::StatusOr<state::SafetensorsReader> file =
      state::SafetensorsReader::Open(request.path());
  if (!file.ok()) return false;
  const auto is = [&](absl::string_view key, absl::string_view want) {
    absl::StatusOr<std::string> value = file->Metadata(key);
    return value.ok() && *value == want;
  };
  return is("format", "shardd") && is("layout", "full") &&
         is("step", absl::StrCat(step)) &&
         file->Metadata("optimizer").ok() == request.include_optimizer_state();
}

}  // namespace shardd::node
