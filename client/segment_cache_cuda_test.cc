// Needs a GPU: tagged "gpu" and built only with --config=cuda. A child
// process stands in for the daemon: it owns a gradient slot in GPU memory
// and exports it by CUDA IPC; this process is the trainer, writing the slot
// through SegmentCache and flushing it, and the child checks what arrived.
//
// Issue #28 (9): a trainer that writes device_data and flushes must not see
// its gradients replaced by the zeroed host copy.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/segment_cache.h"
#include "gtest/gtest.h"
#include "shardd/v1/common.pb.h"

namespace shardd::client {
namespace {

constexpr int kFloats = 1024;

float Pattern(int i) { return 0.25f * static_cast<float>(i) - 7.0f; }

bool ReadAll(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The "daemon": exports a zeroed slot, waits for the trainer's flush, then
// exits 0 if the slot holds the pattern, 2 if it holds something else.
[[noreturn]] void Daemon(int to_trainer, int from_trainer) {
  void* slot = nullptr;
  cudaIpcMemHandle_t handle;
  if (cudaSetDevice(0) != cudaSuccess ||
      cudaMalloc(&slot, kFloats * 4) != cudaSuccess ||
      cudaMemset(slot, 0, kFloats * 4) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess ||
      cudaIpcGetMemHandle(&handle, slot) != cudaSuccess) {
    _exit(3);
  }
  if (write(to_trainer, handle.reserved, sizeof(handle.reserved)) !=
      static_cast<ssize_t>(sizeof(handle.reserved))) {
    _exit(4);
  }
  char flushed = 0;
  if (!ReadAll(from_trainer, &flushed, 1)) _exit(5);
  std::vector<float> got(kFloats);
  if (cudaMemcpy(got.data(), slot, kFloats * 4, cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    _exit(6);
  }
  for (int i = 0; i < kFloats; ++i) {
    if (got[i] != Pattern(i)) _exit(2);
  }
  _exit(0);
}

// Runs the daemon child; `trainer` writes and flushes the slot named by the
// ref it is given. Returns the child's exit status.
//
// The child is this binary executed afresh (main's --daemon_child), not a
// bare fork: once an earlier test has used CUDA here, a forked child holds
// a CUDA state it may not use (on an H200 the second test's child failed
// its first CUDA call).
template <typename Trainer>
int WithDaemon(Trainer trainer) {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) return -1;
  const std::string to_trainer = std::to_string(down[1]);
  const std::string from_trainer = std::to_string(up[0]);
  const pid_t pid = fork();
  if (pid == 0) {
    close(down[0]);
    close(up[1]);
    execl("/proc/self/exe", "segment_cache_cuda_test", "--daemon_child",
          to_trainer.c_str(), from_trainer.c_str(), nullptr);
    _exit(7);
  }
  close(down[1]);
  close(up[0]);
  char handle[64];
  if (!ReadAll(down[0], handle, sizeof(handle))) {
    ADD_FAILURE() << "the daemon child exported nothing";
  } else {
    v1::DataRef ref;
    ref.set_dtype(v1::DTYPE_FP32);
    ref.set_byte_length(kFloats * 4);  // As the daemon's refs say it.
    v1::CudaIpcRef* cuda = ref.mutable_cuda_ipc();
    cuda->set_mem_handle(std::string(handle, sizeof(handle)));
    cuda->set_device_ordinal(0);
    cuda->set_allocation_bytes(kFloats * 4);
    cuda->set_byte_offset(0);
    cuda->set_byte_length(kFloats * 4);
    trainer(ref);
  }
  const char flushed = 1;
  EXPECT_EQ(write(up[1], &flushed, 1), 1);
  close(up[1]);
  close(down[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(SegmentCacheCudaTest, DeviceWrittenSlotReachesTheDaemonIntact) {
  const int exit_code = WithDaemon([](const v1::DataRef& ref) {
    SegmentCache cache;
    absl::StatusOr<GradView> view =
        cache.WriteView(ref, "grad_buffer", GradWriter::kDevice);
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_NE(view->device_data, nullptr);
    EXPECT_TRUE(view->flat.empty()) << "no host copy for a device writer";
    std::vector<float> pattern(kFloats);
    for (int i = 0; i < kFloats; ++i) pattern[i] = Pattern(i);
    // The trainer's own write, as its backward kernels would.
    ASSERT_EQ(cudaMemcpy(const_cast<void*>(view->device_data), pattern.data(),
                         kFloats * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(view->Flush().ok());
    EXPECT_TRUE(cache.ForgetDeviceBuffers().ok());
  });
  EXPECT_EQ(exit_code, 0) << "2: the daemon found other bytes in the slot";
}

TEST(SegmentCacheCudaTest, HostWrittenSlotIsUploadedByFlush) {
  const int exit_code = WithDaemon([](const v1::DataRef& ref) {
    SegmentCache cache;
    absl::StatusOr<GradView> view =
        cache.WriteView(ref, "grad_buffer", GradWriter::kHost);
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_EQ(view->flat.size(), static_cast<size_t>(kFloats));
    for (int i = 0; i < kFloats; ++i) view->flat[i] = Pattern(i);
    ASSERT_TRUE(view->Flush().ok());
    EXPECT_TRUE(cache.ForgetDeviceBuffers().ok());
  });
  EXPECT_EQ(exit_code, 0) << "2: the daemon found other bytes in the slot";
}

}  // namespace
}  // namespace shardd::client

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--daemon_child") == 0) {
    shardd::client::Daemon(std::atoi(argv[2]), std::atoi(argv[3]));
  }
  // A child that died early closes its pipe: the write then fails (and the
  // test says so) instead of SIGPIPE ending the whole test binary.
  signal(SIGPIPE, SIG_IGN);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
