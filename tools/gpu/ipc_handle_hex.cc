#include "tools/gpu/ipc_handle_hex.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardd::tools {
namespace {

int Digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string BytesToHex(const void* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(bytes);
  std::string out;
  out.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 0xf]);
  }
  return out;
}

absl::Status HexToBytes(absl::string_view hex, void* out, size_t size) {
  if (hex.size() != 2 * size) {
    return absl::InvalidArgumentError(
        absl::StrCat("handle: ", hex.size(), " hex digits, want ", 2 * size));
  }
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < hex.size(); ++i) {
    const int d = Digit(hex[i]);
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("handle: character ", i, " is not a hex digit"));
    }
    bytes[i / 2] = static_cast<uint8_t>(bytes[i / 2] << 4 | d);
  }
  if (size > 0) std::memcpy(out, bytes.data(), size);
  return absl::OkStatus();
}

}  // namespace shardd::tools
