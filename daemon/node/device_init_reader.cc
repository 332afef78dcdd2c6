#include "daemon/node/device_init_reader.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardd::node {

absl::Status DeviceInitReader::CheckElements(const core::CudaIpcSource& source,
                                             core::DType dtype,
                                             int64_t first_element, int64_t n,
                                             absl::string_view field) {
  const int64_t size = core::DTypeSize(dtype);
  if (size <= 0 || first_element < 0 || n < 0 ||
      first_element > source.byte_length / size - n) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": elements [", first_element, ", ", first_element, "+", n,
        ") are outside the ", size > 0 ? source.byte_length / size : 0,
        " elements of ", core::DTypeName(dtype)));
  }
  return absl::OkStatus();
}

void DeviceInitReader::Widen(const char* bytes, core::DType dtype,
                             int64_t count, float* out) {
  if (dtype == core::DType::kFloat32) {
    std::memcpy(out, bytes, static_cast<size_t>(count) * 4);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes + i * 2, 2);
    out[i] = dtype == core::DType::kBFloat16 ? core::BFloat16ToFloat(bits)
                                             : core::HalfToFloat(bits);
  }
}

}  // namespace shardd::node
