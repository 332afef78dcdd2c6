#include "daemon/node/cuda/cuda_ipc_init_reader.h"

#include <cuda_runtime_api.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "client/cuda_ipc_init.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/cuda/cuda_context_api.h"
#include "daemon/core/dtype.h"
#include "daemon/node/proto_convert.h"
#include "gtest/gtest.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {
namespace {

// Three staging windows and a bit: the last one is partial.
constexpr int64_t kBytes = 2 * DeviceInitReader::kWindowBytes + (8 << 20) + 12;
// A bf16 tensor inside the same allocation (a trainer's flat buffer).
constexpr int64_t kBf16Offset = 4096 + 2;
constexpr int64_t kBf16Bytes = int64_t{20} << 20;
constexpr int kPipeTimeoutMs = 120'000;

std::string Pattern() {
  std::string bytes(kBytes, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < kBytes; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    bytes[i] = static_cast<char>(x >> 56);
  }
  return bytes;
}

bool WaitReadable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, kPipeTimeoutMs) == 1;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!WaitReadable(fd)) return false;
    const ssize_t got = read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = write(fd, p, n);
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

bool SendMessage(int fd, const std::string& bytes) {
  const uint64_t n = bytes.size();
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, bytes.data(), n);
}

bool ReceiveMessage(int fd, std::string* bytes) {
  uint64_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n)) || n > (1 << 20)) return false;
  bytes->resize(n);
  return ReadAll(fd, bytes->data(), n);
}

// The trainer: exports a cudaMalloc'd buffer holding Pattern(), sends the
// two TensorInits, keeps the buffer until the test process closes `done`.
[[noreturn]] void Trainer(int out, int done) {
  const std::string host = Pattern();
  void* base = nullptr;
  if (cudaMalloc(&base, kBytes) != cudaSuccess ||
      cudaMemcpy(base, host.data(), kBytes, cudaMemcpyHostToDevice) !=
          cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {
    _exit(2);
  }
  absl::StatusOr<v1::TensorInit> whole =
      client::CudaIpcInit::Export(base, 0, kBytes);
  absl::StatusOr<v1::TensorInit> bf16 =
      client::CudaIpcInit::Export(base, kBf16Offset, kBf16Bytes);
  // Not an allocation's start: refused.
  absl::StatusOr<v1::TensorInit> interior =
      client::CudaIpcInit::Export(static_cast<char*>(base) + 256, 0, 16);
  if (!whole.ok() || !bf16.ok() ||
      interior.status().code() != absl::StatusCode::kInvalidArgument ||
      !SendMessage(out, whole->SerializeAsString()) ||
      !SendMessage(out, bf16->SerializeAsString())) {
    _exit(3);
  }
  char byte;
  if (WaitReadable(done)) (void)read(done, &byte, 1);  // EOF: finished.
  cudaFree(base);
  _exit(0);
}

class CudaIpcInitReaderTest : public ::testing::Test {
 protected:
  // Forks before this process makes any CUDA call (a forked child cannot
  // use a CUDA context its parent created).
  static void SetUpTestSuite() {
    int to_parent[2], to_child[2];
    ASSERT_EQ(pipe(to_parent), 0);
    ASSERT_EQ(pipe(to_child), 0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(to_parent[0]);
      close(to_child[1]);
      Trainer(to_parent[1], to_child[0]);
    }
    close(to_parent[1]);
    close(to_child[0]);
    from_child_ = to_parent[0];
    to_child_ = to_child[1];
    std::string whole, bf16;
    v1::TensorInit init;
    // The child exits before sending when it cannot use a GPU.
    ASSERT_TRUE(ReceiveMessage(from_child_, &whole) &&
                ReceiveMessage(from_child_, &bf16))
        << "this test needs a GPU: the exporting process sent no handle";
    ASSERT_TRUE(init.ParseFromString(whole));
    whole_ = new core::CudaIpcSource(
        ProtoConvert::CudaIpcSourceFromProto(init.cuda_ipc()));
    ASSERT_TRUE(init.ParseFromString(bf16));
    bf16_ = new core::CudaIpcSource(
        ProtoConvert::CudaIpcSourceFromProto(init.cuda_ipc()));
    host_ = new std::string(Pattern());
  }

  static void TearDownTestSuite() {
    if (child_ > 0) {
      close(to_child_);  // The trainer frees its buffer and exits.
      int status = 0;
      waitpid(child_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    close(from_child_);
    delete whole_;
    delete bf16_;
    delete host_;
  }

  void SetUp() override {
    ASSERT_TRUE(whole_ != nullptr && bf16_ != nullptr && host_ != nullptr)
        << "this test needs a GPU: no exported buffer";
  }

  static inline pid_t child_ = -1;
  static inline int from_child_ = -1;
  static inline int to_child_ = -1;
  static inline core::CudaIpcSource* whole_ = nullptr;
  static inline core::CudaIpcSource* bf16_ = nullptr;
  static inline std::string* host_ = nullptr;

  CudaIpcInitReader reader_;
};

TEST_F(CudaIpcInitReaderTest, ExportedRefNamesTheWholeAllocation) {
  EXPECT_EQ(whole_->mem_handle.size(), 64u);
  EXPECT_FALSE(whole_->pci_bus_id.empty());
  EXPECT_GE(whole_->allocation_bytes, kBytes);
  EXPECT_EQ(whole_->byte_length, kBytes);
  EXPECT_EQ(bf16_->byte_offset, kBf16Offset);
}

TEST_F(CudaIpcInitReaderTest, ChecksumEqualsCrcOfTheHostBytes) {
  absl::StatusOr<uint32_t> crc = reader_.Checksum(*whole_, "init.cuda_ipc");
  ASSERT_TRUE(crc.ok()) << crc.status();
  EXPECT_EQ(*crc, core::Crc32c(host_->data(), host_->size()));
  absl::StatusOr<uint32_t> part = reader_.Checksum(*bf16_, "init.cuda_ipc");
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(*part, core::Crc32c(host_->data() + kBf16Offset, kBf16Bytes));
}

TEST_F(CudaIpcInitReaderTest, CopiesAnFp32SliceStraightIntoTheOutput) {
  const int64_t first = (3 << 20) + 1;
  const int64_t n = int64_t{5} << 20;  // 20 MiB.
  std::vector<float> out(n);
  ASSERT_TRUE(reader_
                  .Read(*whole_, core::DType::kFloat32, first, n, out.data(),
                        "init.cuda_ipc")
                  .ok());
  EXPECT_EQ(std::memcmp(out.data(), host_->data() + first * 4, n * 4), 0);
}

TEST_F(CudaIpcInitReaderTest, WidensABf16SliceAcrossWindows) {
  const int64_t first = 7;
  const int64_t n = int64_t{9} << 20;  // 18 MiB of bf16: two windows.
  std::vector<float> out(n);
  ASSERT_TRUE(reader_
                  .Read(*bf16_, core::DType::kBFloat16, first, n, out.data(),
                        "init.cuda_ipc")
                  .ok());
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, host_->data() + kBf16Offset + (first + i) * 2, 2);
    const float want = core::BFloat16ToFloat(bits);
    ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "element " << first + i;
  }
}

TEST_F(CudaIpcInitReaderTest, RefusesElementsOutsideTheRange) {
  std::vector<float> out(4);
  const absl::Status s = reader_.Read(*whole_, core::DType::kFloat32,
                                      kBytes / 4 - 2, 4, out.data(), "f");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST_F(CudaIpcInitReaderTest, HandleOfNoAllocationIsAFailedPrecondition) {
  core::CudaIpcSource bogus = *whole_;
  bogus.mem_handle.assign(64, '\x5a');
  const absl::StatusOr<uint32_t> crc = reader_.Checksum(bogus, "f");
  EXPECT_EQ(crc.status().code(), absl::StatusCode::kFailedPrecondition)
      << crc.status();
  bogus = *whole_;
  bogus.pci_bus_id = "0000:ff:1f.7";
  EXPECT_EQ(reader_.Checksum(bogus, "f").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CudaIpcInitReaderTest, GivesTheThreadBackItsContext) {
  // A fresh thread has no context bound; after a read it still has none.
  std::thread thread([this] {
    const core::CudaContextApi& api = core::cuda::RealCudaContextApi();
    void* before = reinterpret_cast<void*>(1);
    ASSERT_EQ(api.get_current(&before), 0);
    EXPECT_EQ(before, nullptr);
    std::vector<float> out(16);
    EXPECT_TRUE(reader_
                    .Read(*whole_, core::DType::kFloat32, 0, 16, out.data(),
                          "init.cuda_ipc")
                    .ok());
    void* after = reinterpret_cast<void*>(1);
    ASSERT_EQ(api.get_current(&after), 0);
    EXPECT_EQ(after, nullptr);
  });
  thread.join();
}

}  // namespace
}  // namespace shardd::node
