#include "daemon/core/host_port.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

bool ValidHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '-' || c == '_';
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text,
                                       absl::string_view field) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", why, " in \"", text, "\" (expected host:port)"));
  };
  HostPort out;
  absl::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) return bad("unterminated '['");
    out.host = std::string(text.substr(1, close - 1));
    if (out.host.empty() ||
        out.host.find_first_not_of("0123456789abcdefABCDEF:.") !=
            std::string::npos) {
      return bad("malformed IPv6 address");
    }
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("missing port");
    }
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return bad("missing port");
    out.host = std::string(text.substr(0, colon));
    if (out.host.empty()) return bad("missing host");
    for (char c : out.host) {
      if (!ValidHostChar(c)) return bad("invalid character in host");
    }
    port_text = text.substr(colon + 1);
  }
  if (port_text.empty() ||
      port_text.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port_text, &out.port) || out.port < 1 ||
      out.port > 65535) {
    return bad("port must be a number in [1, 65535]");
  }
  return out;
}

}  // namespace shardd::core
