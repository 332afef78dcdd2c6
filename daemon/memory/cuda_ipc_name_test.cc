#include "daemon/memory/cuda_ipc_name.h"

#include <string>

#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

std::string Handle() {
  std::string h(kCudaIpcHandleBytes, '\0');
  for (int i = 0; i < kCudaIpcHandleBytes; ++i) {
    h[i] = static_cast<char>(i * 37 + 255);  // Every nibble, high bits too.
  }
  return h;
}

TEST(CudaIpcNameTest, RoundTripsEveryByte) {
  auto name = FormatCudaIpcName(3, Handle());
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_TRUE(IsCudaIpcName(*name));
  EXPECT_EQ(name->size(), std::string("cuda-ipc:3:").size() + 128);
  auto parsed = ParseCudaIpcName(*name);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->device, 3);
  EXPECT_EQ(parsed->mem_handle, Handle());
}

TEST(CudaIpcNameTest, RejectsMalformedNamesSayingWhatIsWrong) {
  const std::string hex = FormatCudaIpcName(0, Handle())->substr(11);
  struct Case {
    std::string name;
    std::string says;
  };
  for (const Case& c : {
           Case{"/dev/shm/shardd-1", "does not start with"},
           Case{"cuda-ipc:x:" + hex, "expected cuda-ipc:<device>"},
           Case{"cuda-ipc:-1:" + hex, "expected cuda-ipc:<device>"},
           Case{"cuda-ipc:0", "expected cuda-ipc:<device>"},
           Case{"cuda-ipc:0:" + hex.substr(2), "128 hex digits, got 126"},
           Case{"cuda-ipc:0:zz" + hex.substr(2), "'z' is not a hex digit"},
       }) {
    auto parsed = ParseCudaIpcName(c.name);
    ASSERT_FALSE(parsed.ok()) << c.name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos)
        << parsed.status();
  }
  EXPECT_FALSE(IsCudaIpcName("/dev/shm/x"));
  EXPECT_EQ(FormatCudaIpcName(0, "short").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FormatCudaIpcName(-1, Handle()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::memory
