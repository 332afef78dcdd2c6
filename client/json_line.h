#ifndef SHARDD_CLIENT_JSON_LINE_H_
#define SHARDD_CLIENT_JSON_LINE_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace shardd::client {

// `message` as one line of proto3 JSON for tools (shardctl -o json): the
// .proto field names, every field printed (defaults too, so that a script
// finds each key), 64-bit integers as strings. No trailing newline.
// INTERNAL when protobuf cannot convert it.
absl::StatusOr<std::string> JsonLine(const google::protobuf::Message& message);

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_JSON_LINE_H_
