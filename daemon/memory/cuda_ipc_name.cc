#include "daemon/memory/cuda_ipc_name.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace shardd::memory {
namespace {

constexpr absl::string_view kPrefix = "cuda-ipc:";

}  // namespace

absl::StatusOr<std::string> FormatCudaIpcName(int device,
                                              absl::string_view mem_handle) {
  if (device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ipc name: device must be >= 0, got ", device));
  }
  if (mem_handle.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ipc name: the handle must be ", kCudaIpcHandleBytes,
                     " bytes, got ", mem_handle.size()));
  }
  std::string out = absl::StrCat(kPrefix, device, ":");
  for (char c : mem_handle) {
    absl::StrAppend(&out,
                    absl::StrFormat("%02x", static_cast<unsigned char>(c)));
  }
  return out;
}

bool IsCudaIpcName(absl::string_view name) {
  return absl::StartsWith(name, kPrefix);
}

absl::StatusOr<CudaIpcName> ParseCudaIpcName(absl::string_view name) {
  if (!IsCudaIpcName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda ipc name '", name, "': does not start with '", kPrefix, "'"));
  }
  const std::vector<absl::string_view> parts =
      absl::StrSplit(name.substr(kPrefix.size()), ':');
  CudaIpcName out;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &out.device) ||
      out.device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda ipc name '", name, "': expected cuda-ipc:<device>:<hex handle>"));
  }
  const absl::string_view hex = parts[1];
  if (hex.size() != 2 * kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ipc name: the handle must be ",
                     2 * kCudaIpcHandleBytes, " hex digits, got ", hex.size()));
  }
  for (size_t i = 0; i < hex.size(); i += 2) {
    int byte = 0;
    for (size_t k = i; k < i + 2; ++k) {
      const char c = absl::ascii_tolower(hex[k]);
      int v = -1;
      if (c >= '0' && c <= '9') v = c - '0';
      if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
      if (v < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda ipc name: '", hex.substr(k, 1), "' is not a hex digit"));
      }
      byte = byte * 16 + v;
    }
    out.mem_handle.push_back(static_cast<char>(byte));
  }
  return out;
}

}  // namespace shardd::memory
