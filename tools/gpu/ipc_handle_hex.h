#ifndef SHARDD_TOOLS_GPU_IPC_HANDLE_HEX_H_
#define SHARDD_TOOLS_GPU_IPC_HANDLE_HEX_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

// An opaque handle (a cudaIpcMemHandle_t's bytes) as lower-case hex, for
// passing it to another process on its command line. Pure and thread-safe.
namespace shardd::tools {

std::string BytesToHex(const void* bytes, size_t size);

// Fills `out` (`size` bytes) from `hex`, which must hold exactly 2 * size
// hex digits (either case). INVALID_ARGUMENT naming the length or the first
// bad character otherwise; `out` is then left untouched.
absl::Status HexToBytes(absl::string_view hex, void* out, size_t size);

}  // namespace shardd::tools

#endif  // SHARDD_TOOLS_GPU_IPC_HANDLE_HEX_H_
