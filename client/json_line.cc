#include "client/json_line.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace shardd::client {

absl::StatusOr<std::string> JsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  // protobuf's own Status type (not absl's in Debian's 3.21).
  if (const auto s =
          google::protobuf::util::MessageToJsonString(message, &out, options);
      !s.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot print ", message.GetTypeName(), " as JSON: ", s.ToString()));
  }
  return out;
}

}  // namespace shardd::client
