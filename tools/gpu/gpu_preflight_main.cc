// gpu_preflight: checks, before anything of ours runs on a lent GPU machine,
// that the sandbox gives what shardd needs, so that a sandbox limit is not
// taken for a bug of ours. Built only with --config=cuda.
//
//   gpu_preflight [--device=0] [--timeout_s=30]
//
// Prints one line per check, "preflight NAME: ok DETAIL" or "preflight
// NAME: FAIL REASON" (PreflightReport), in this order:
//   driver, runtime         cudaDriverGetVersion / cudaRuntimeGetVersion
//   device                  a device, its name, PCI bus id, memory and
//                           compute capability (ours is built for sm_90)
//   compute-mode            DEFAULT: the trainer and shardd share the GPU
//   attributes              unified addressing and memory pools (required),
//                           IPC events, mempool IPC handle types, GPUDirect
//                           RDMA (reported)
//   kernel                  a kernel built like ours runs, bit for bit
//   memory-pool             cudaMallocAsync / cudaMemsetAsync /
//                           cudaFreeAsync on a non-blocking stream (NCCL's
//                           scratch is allocated this way)
//   cuda-ipc                this process cudaMallocs a buffer, fills a
//                           pattern and exports it (cudaIpcGetMemHandle); a
//                           second process (this binary again, the handle
//                           in hex on its command line) opens it, compares
//                           every byte and writes a second pattern back,
//                           which this process then compares
//   nccl-version            ncclGetVersion against the headers built with
//   nccl-init               a size-1 non-blocking communicator
//                           (ncclGetUniqueId, ncclCommInitRankConfig, as
//                           the NCCL backend makes them)
//   nccl-allreduce          one in-place fp32 all-reduce on it
//   nccl-sendrecv           a grouped ncclSend/ncclRecv to itself
//   nccl-finalize           ncclCommFinalize + ncclCommDestroy
// When a nccl-* check fails, the NCCL checks run once more in a fresh
// process with NCCL_DEBUG=INFO (lines named "... (retry, NCCL_DEBUG=INFO)",
// NCCL's own log on stderr); the first failure still counts.
//
// Every wait has a deadline (--timeout_s each). Exit status: 0 when every
// check ran and passed, 1 otherwise, 2 for bad flags.

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "tools/gpu/ipc_handle_hex.h"
#include "tools/gpu/preflight_kernel.h"
#include "tools/gpu/preflight_report.h"

ABSL_FLAG(int, device, 0, "the CUDA device to check");
ABSL_FLAG(int64_t, timeout_s, 30,
          "deadline of each wait (the second process, NCCL start-up, each "
          "NCCL operation)");
ABSL_FLAG(std::string, ipc_child, "",
          "internal: open this hex cudaIpcMemHandle_t as the second process");
ABSL_FLAG(int64_t, ipc_bytes, 0, "internal: the exported buffer's size");
ABSL_FLAG(bool, nccl_retry, false,
          "internal: run only the NCCL checks (the NCCL_DEBUG=INFO retry)");

namespace shardd::tools {
namespace {

constexpr int64_t kIpcBytes = int64_t{32} << 20;
constexpr uint32_t kParentSeed = 0x5eed0001u;
constexpr uint32_t kChildSeed = 0x5eed0002u;

std::string CudaError(absl::string_view what, cudaError_t e) {
  return absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                      cudaGetErrorString(e), ")");
}

std::string NcclError(absl::string_view what, ncclResult_t r) {
  return absl::StrCat(what, ": ", ncclGetErrorString(r), " (", r, ")");
}

std::string Version(int v) {  // CUDA's 1000 * major + 10 * minor.
  return absl::StrCat(v / 1000, ".", v % 1000 / 10);
}

// The first index where `got` differs from the pattern, or -1.
int64_t FirstMismatch(const std::vector<uint32_t>& got, uint32_t seed) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != PatternWord(seed, static_cast<int64_t>(i))) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

std::vector<uint32_t> Pattern(uint32_t seed, int64_t words) {
  std::vector<uint32_t> v(words);
  for (int64_t i = 0; i < words; ++i) v[i] = PatternWord(seed, i);
  return v;
}

// Polls `stream` until its work is done or the deadline (never
// cudaStreamSynchronize, which has none).
absl::Status AwaitStream(cudaStream_t stream, MonoTime deadline) {
  while (true) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      return absl::InternalError(CudaError("cudaStreamQuery", e));
    }
    if (MonoNow() >= deadline) {
      return absl::DeadlineExceededError("the stream's work did not finish");
    }
    absl::SleepFor(absl::Microseconds(200));
  }
}

// Runs this binary again with `args` (and `env` added), its stdout and
// stderr shared with ours, and waits for it until `deadline` (then SIGKILL).
// Returns its exit status; DEADLINE_EXCEEDED, or the errno of a failed
// pipe/fork/exec.
absl::StatusOr<int> RunSelf(const std::vector<std::string>& args,
                            const std::vector<std::string>& env,
                            MonoTime deadline) {
  // The child holds the pipe's write end (not close-on-exec) until it
  // exits: end of file on the read end tells this process it is gone,
  // through a poll() that has a deadline.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, "pipe2");
  }
  absl::Cleanup close_read = [&] { close(fds[0]); };
  std::vector<std::string> argv_s = {"/proc/self/exe"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s(env);
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[1]);
    return absl::ErrnoToStatus(err, "fork");
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    if (fcntl(fds[1], F_SETFD, 0) != 0) _exit(126);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  bool timed_out = false;
  while (true) {
    const absl::Duration left = deadline - MonoNow();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    pollfd p = {fds[0], POLLIN, 0};
    const int n = poll(&p, 1,
                       static_cast<int>(absl::ToInt64Milliseconds(
                           left + absl::Milliseconds(1))));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // Then waitpid below waits for it to end.
    if (n == 0) continue;
    char c;
    const ssize_t r = read(fds[0], &c, 1);
    if (r == 0) break;  // End of file: the child is gone.
    if (r < 0 && errno != EINTR && errno != EAGAIN) break;
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        "the second process did not end in time (killed)");
  }
  if (WIFSIGNALED(status)) {
    return absl::InternalError(
        absl::StrCat("the second process died of signal ", WTERMSIG(status)));
  }
  return WEXITSTATUS(status);
}

// The second process of cuda-ipc: opens the handle, compares every byte
// with the parent's pattern, writes its own. Exit 0 when all went well; its
// messages go to stderr, not as "preflight" lines (the parent reports).
int IpcChild(const std::string& hex, int64_t bytes, int device) {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "gpu_preflight (second process): %s\n", why.c_str());
    return 1;
  };
  cudaIpcMemHandle_t handle;
  if (absl::Status s = HexToBytes(hex, &handle, sizeof(handle)); !s.ok()) {
    return fail(s.ToString());
  }
  if (bytes <= 0 || bytes % 4 != 0) return fail("--ipc_bytes");
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return fail(CudaError("cudaSetDevice", e));
  }
  void* ptr = nullptr;
  if (cudaError_t e =
          cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    return fail(CudaError("cudaIpcOpenMemHandle", e));
  }
  absl::Cleanup close_handle = [ptr] { cudaIpcCloseMemHandle(ptr); };
  std::vector<uint32_t> got(bytes / 4);
  if (cudaError_t e =
          cudaMemcpy(got.data(), ptr, bytes, cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    return fail(CudaError("cudaMemcpy from the opened buffer", e));
  }
  if (const int64_t at = FirstMismatch(got, kParentSeed); at >= 0) {
    return fail(absl::StrFormat(
        "the opened buffer differs from the exporter's at byte %d", at * 4));
  }
  const std::vector<uint32_t> mine = Pattern(kChildSeed, bytes / 4);
  if (cudaError_t e =
          cudaMemcpy(ptr, mine.data(), bytes, cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return fail(CudaError("cudaMemcpy into the opened buffer", e));
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return fail(CudaError("cudaDeviceSynchronize", e));
  }
  std::move(close_handle).Cancel();
  if (cudaError_t e = cudaIpcCloseMemHandle(ptr); e != cudaSuccess) {
    return fail(CudaError("cudaIpcCloseMemHandle", e));
  }
  return 0;
}

// Returns whether the device can be used at all (later checks need it).
bool CheckDevice(PreflightReport& report, int device) {
  int driver = 0, runtime = 0;
  const cudaError_t de = cudaDriverGetVersion(&driver);
  if (de != cudaSuccess || driver == 0) {
    report.Fail("driver",
                de != cudaSuccess
                    ? CudaError("cudaDriverGetVersion", de)
                    : "no CUDA driver (cudaDriverGetVersion gives 0)");
  } else {
    report.Ok("driver", absl::StrCat("CUDA ", Version(driver)));
  }
  const cudaError_t re = cudaRuntimeGetVersion(&runtime);
  if (re != cudaSuccess) {
    report.Fail("runtime", CudaError("cudaRuntimeGetVersion", re));
  } else if (driver != 0 && driver < runtime) {
    report.Fail("runtime",
                absl::StrCat("CUDA runtime ", Version(runtime),
                             " is newer than the driver's ", Version(driver)));
  } else {
    report.Ok("runtime", absl::StrCat("CUDA ", Version(runtime)));
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    report.Fail("device", CudaError("cudaGetDeviceCount", e));
    return false;
  }
  if (device < 0 || device >= count) {
    report.Fail("device", absl::StrCat("--device=", device, " but ", count,
                                       " device(s) visible"));
    return false;
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    report.Fail("device", CudaError("cudaSetDevice", e));
    return false;
  }
  cudaDeviceProp prop;
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device);
      e != cudaSuccess) {
    report.Fail("device", CudaError("cudaGetDeviceProperties", e));
    return false;
  }
  char bus[32] = "?";
  cudaDeviceGetPCIBusId(bus, sizeof(bus), device);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
      e != cudaSuccess) {
    report.Fail("device", CudaError("cudaMemGetInfo (creating a context)", e));
    return false;
  }
  const std::string what = absl::StrFormat(
      "%d of %d: %s, PCI %s, sm_%d%d, %.1f GiB free of %.1f GiB", device, count,
      prop.name, bus, prop.major, prop.minor,
      static_cast<double>(free_bytes) / (1 << 30),
      static_cast<double>(total_bytes) / (1 << 30));
  if (prop.major < 9) {
    report.Fail("device", absl::StrCat(what,
                                       "; our kernels need sm_90 or "
                                       "later (bazel/cuda.bzl)"));
    return false;
  }
  report.Ok("device", what);

  int mode = -1;
  cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, device);
  switch (mode) {
    case cudaComputeModeDefault:
      report.Ok("compute-mode", "DEFAULT");
      break;
    case cudaComputeModeExclusiveProcess:
      report.Fail("compute-mode",
                  "EXCLUSIVE_PROCESS: a trainer cannot open shardd's buffers "
                  "(one process per GPU)");
      break;
    case cudaComputeModeProhibited:
      report.Fail("compute-mode", "PROHIBITED: no process may use the GPU");
      return false;
    default:
      report.Fail("compute-mode", absl::StrCat("unknown mode ", mode));
  }

  auto attribute = [device](cudaDeviceAttr a) {
    int v = -1;
    return cudaDeviceGetAttribute(&v, a, device) == cudaSuccess ? v : -1;
  };
  const int unified = attribute(cudaDevAttrUnifiedAddressing);
  const int pools = attribute(cudaDevAttrMemoryPoolsSupported);
  const int pool_handles = attribute(cudaDevAttrMemoryPoolSupportedHandleTypes);
  const int ipc_events = attribute(cudaDevAttrIpcEventSupport);
  const int rdma = attribute(cudaDevAttrGPUDirectRDMASupported);
  const std::string attrs =
      absl::StrCat("unified addressing ", unified, ", memory pools ", pools,
                   ", mempool IPC handle types 0x",
                   absl::Hex(pool_handles < 0 ? 0 : pool_handles),
                   ", IPC events ", ipc_events, ", GPUDirect RDMA ", rdma);
  if (unified != 1 || pools != 1) {
    report.Fail("attributes", absl::StrCat(attrs,
                                           " (unified addressing and "
                                           "memory pools are required)"));
  } else {
    report.Ok("attributes", attrs);
  }
  return true;
}

void CheckKernel(PreflightReport& report, MonoTime deadline) {
  constexpr int64_t kWords = (int64_t{1} << 22) + 7;
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    report.Fail("kernel", CudaError("cudaStreamCreateWithFlags", e));
    return;
  }
  absl::Cleanup destroy = [stream] { cudaStreamDestroy(stream); };
  uint32_t* buf = nullptr;
  if (cudaError_t e = cudaMalloc(&buf, kWords * 4); e != cudaSuccess) {
    report.Fail("kernel", CudaError("cudaMalloc", e));
    return;
  }
  absl::Cleanup free_buf = [buf] { cudaFree(buf); };
  if (int e = LaunchFillPattern(buf, kWords, 0x1234u, stream); e != 0) {
    report.Fail("kernel",
                CudaError("launch (sm_90 + PTX)", static_cast<cudaError_t>(e)));
    return;
  }
  std::vector<uint32_t> got(kWords);
  if (cudaError_t e = cudaMemcpyAsync(got.data(), buf, kWords * 4,
                                      cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess) {
    report.Fail("kernel", CudaError("cudaMemcpyAsync", e));
    return;
  }
  if (absl::Status s = AwaitStream(stream, deadline); !s.ok()) {
    report.Fail("kernel", s.ToString());
    return;
  }
  if (const int64_t at = FirstMismatch(got, 0x1234u); at >= 0) {
    report.Fail("kernel", absl::StrCat("word ", at, " is wrong"));
    return;
  }
  report.Ok("kernel", absl::StrCat(kWords,
                                   " words written by a kernel built "
                                   "like ours, bit for bit"));
}

void CheckMemoryPool(PreflightReport& report, MonoTime deadline) {
  constexpr int64_t kBytes = int64_t{64} << 20;
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    report.Fail("memory-pool", CudaError("cudaStreamCreateWithFlags", e));
    return;
  }
  absl::Cleanup destroy = [stream] { cudaStreamDestroy(stream); };
  void* p = nullptr;
  if (cudaError_t e = cudaMallocAsync(&p, kBytes, stream); e != cudaSuccess) {
    report.Fail("memory-pool", CudaError("cudaMallocAsync", e));
    return;
  }
  std::vector<uint8_t> got(kBytes, 0);
  cudaError_t e = cudaMemsetAsync(p, 0x5a, kBytes, stream);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(got.data(), p, kBytes, cudaMemcpyDeviceToHost, stream);
  }
  const cudaError_t fe = cudaFreeAsync(p, stream);
  if (e != cudaSuccess) {
    report.Fail("memory-pool", CudaError("cudaMemsetAsync/cudaMemcpyAsync", e));
    return;
  }
  if (fe != cudaSuccess) {
    report.Fail("memory-pool", CudaError("cudaFreeAsync", fe));
    return;
  }
  if (absl::Status s = AwaitStream(stream, deadline); !s.ok()) {
    report.Fail("memory-pool", s.ToString());
    return;
  }
  for (int64_t i = 0; i < kBytes; ++i) {
    if (got[i] != 0x5a) {
      report.Fail("memory-pool", absl::StrCat("byte ", i, " was not set"));
      return;
    }
  }
  report.Ok("memory-pool",
            "64 MiB cudaMallocAsync, memset, cudaFreeAsync on "
            "a non-blocking stream");
}

void CheckIpc(PreflightReport& report, int device, absl::Duration timeout) {
  void* buf = nullptr;
  if (cudaError_t e = cudaMalloc(&buf, kIpcBytes); e != cudaSuccess) {
    report.Fail("cuda-ipc", CudaError("cudaMalloc", e));
    return;
  }
  absl::Cleanup free_buf = [buf] { cudaFree(buf); };
  const std::vector<uint32_t> mine = Pattern(kParentSeed, kIpcBytes / 4);
  if (cudaError_t e =
          cudaMemcpy(buf, mine.data(), kIpcBytes, cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    report.Fail("cuda-ipc", CudaError("cudaMemcpy", e));
    return;
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    report.Fail("cuda-ipc", CudaError("cudaDeviceSynchronize", e));
    return;
  }
  cudaIpcMemHandle_t handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, buf); e != cudaSuccess) {
    report.Fail("cuda-ipc", CudaError("cudaIpcGetMemHandle", e));
    return;
  }
  absl::StatusOr<int> child = RunSelf(
      {absl::StrCat("--ipc_child=", BytesToHex(&handle, sizeof(handle))),
       absl::StrCat("--ipc_bytes=", kIpcBytes),
       absl::StrCat("--device=", device)},
      {}, MonoNow() + timeout);
  if (!child.ok()) {
    report.Fail("cuda-ipc", child.status().ToString());
    return;
  }
  if (*child != 0) {
    report.Fail("cuda-ipc",
                absl::StrCat("the second process failed (exit ", *child,
                             "; its message is on stderr)"));
    return;
  }
  std::vector<uint32_t> got(kIpcBytes / 4);
  if (cudaError_t e =
          cudaMemcpy(got.data(), buf, kIpcBytes, cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    report.Fail("cuda-ipc", CudaError("cudaMemcpy back", e));
    return;
  }
  if (const int64_t at = FirstMismatch(got, kChildSeed); at >= 0) {
    report.Fail("cuda-ipc",
                absl::StrCat("the second process's writes are missing from "
                             "byte ",
                             at * 4));
    return;
  }
  report.Ok("cuda-ipc",
            "32 MiB exported, opened by a second process, read and written "
            "back bit for bit");
}

// Polls a non-blocking communicator until its last call is no longer in
// progress, or the deadline.
ncclResult_t AwaitComm(ncclComm_t comm, ncclResult_t first, MonoTime deadline) {
  ncclResult_t state = first;
  while (state == ncclInProgress) {
    if (MonoNow() >= deadline) return ncclInProgress;
    absl::SleepFor(absl::Microseconds(500));
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        r != ncclSuccess) {
      return r;
    }
  }
  return state;
}

// The NCCL checks; returns whether all passed. `suffix` names a retry.
bool CheckNccl(PreflightReport& report, int device, absl::Duration timeout,
               bool have_device, absl::string_view suffix) {
  auto name = [&](absl::string_view n) { return absl::StrCat(n, suffix); };
  const char* const kNames[] = {"nccl-init", "nccl-allreduce", "nccl-sendrecv",
                                "nccl-finalize"};
  int version = 0;
  if (ncclResult_t r = ncclGetVersion(&version); r != ncclSuccess) {
    report.Fail(name("nccl-version"), NcclError("ncclGetVersion", r));
    return false;
  }
  const std::string versions = absl::StrCat(
      version, " (the library), built against ", NCCL_VERSION_CODE);
  if (version / 100 != NCCL_VERSION_CODE / 100) {
    report.Fail(name("nccl-version"),
                absl::StrCat(versions, ": another major.minor release"));
  } else {
    report.Ok(name("nccl-version"), versions);
  }
  if (!have_device) {
    for (const char* n : kNames)
      report.NotRun(name(n), "no usable CUDA device");
    return false;
  }
  int at = 0;  // The first check not yet reported.
  auto fail_rest = [&](const std::string& why) {
    report.Fail(name(kNames[at]), why);
    for (++at; at < 4; ++at) {
      report.NotRun(name(kNames[at]), "an earlier NCCL check failed");
    }
    return false;
  };
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return fail_rest(CudaError("cudaSetDevice", e));
  }
  // The stream and buffers first: their cleanups then run after the
  // communicator's abort, never while a kernel of it may still run (cudaFree
  // would wait for it).
  constexpr int64_t kCount = int64_t{1} << 20;
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return fail_rest(CudaError("cudaStreamCreateWithFlags", e));
  }
  absl::Cleanup destroy_stream = [stream] { cudaStreamDestroy(stream); };
  float* a = nullptr;
  float* b = nullptr;
  if (cudaError_t e = cudaMalloc(&a, kCount * 4); e != cudaSuccess) {
    return fail_rest(CudaError("cudaMalloc", e));
  }
  absl::Cleanup free_a = [a] { cudaFree(a); };
  if (cudaError_t e = cudaMalloc(&b, kCount * 4); e != cudaSuccess) {
    return fail_rest(CudaError("cudaMalloc", e));
  }
  absl::Cleanup free_b = [b] { cudaFree(b); };
  std::vector<float> host(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    host[i] = 0.25f * static_cast<float>(i % 4099) - 512.0f;
  }
  if (cudaError_t e =
          cudaMemcpy(a, host.data(), kCount * 4, cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return fail_rest(CudaError("cudaMemcpy", e));
  }
  if (cudaError_t e = cudaMemset(b, 0, kCount * 4); e != cudaSuccess) {
    return fail_rest(CudaError("cudaMemset", e));
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return fail_rest(CudaError("cudaDeviceSynchronize", e));
  }

  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return fail_rest(NcclError("ncclGetUniqueId", r));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const MonoTime init_deadline = MonoNow() + timeout;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return fail_rest(NcclError("ncclCommInitRankConfig", r));
  }
  // Every way out but a clean finalize aborts (which stops the
  // communicator's kernels without waiting on anything).
  absl::Cleanup abort = [comm] { ncclCommAbort(comm); };
  r = AwaitComm(comm, r, init_deadline);
  if (r != ncclSuccess) {
    return fail_rest(r == ncclInProgress
                         ? "not ready by the deadline"
                         : NcclError("ncclCommInitRankConfig (async)", r));
  }
  report.Ok(name(kNames[at++]),
            "size-1 non-blocking communicator (ncclCommInitRankConfig)");
  // Runs `call` (an NCCL enqueue) and waits for the device to finish it;
  // then compares `check` (device) with `host`.
  auto run = [&](absl::string_view what, auto call,
                 float* check) -> std::string {
    const MonoTime deadline = MonoNow() + timeout;
    ncclResult_t res = AwaitComm(comm, call(), deadline);
    if (res != ncclSuccess) {
      return res == ncclInProgress ? absl::StrCat(what,
                                                  ": not enqueued by "
                                                  "the deadline")
                                   : NcclError(what, res);
    }
    if (absl::Status s = AwaitStream(stream, deadline); !s.ok()) {
      return absl::StrCat(what, ": ", s.ToString());
    }
    std::vector<float> got(kCount);
    if (cudaError_t e =
            cudaMemcpy(got.data(), check, kCount * 4, cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return CudaError("cudaMemcpy", e);
    }
    if (std::memcmp(got.data(), host.data(), kCount * 4) != 0) {
      return absl::StrCat(what, ": the result differs from the input");
    }
    return "";
  };
  std::string error = run(
      "ncclAllReduce",
      [&] {
        return ncclAllReduce(a, a, kCount, ncclFloat32, ncclSum, comm, stream);
      },
      a);
  if (!error.empty()) return fail_rest(error);
  report.Ok(name(kNames[at++]), "4 MiB fp32 sum in place, bit for bit");
  error = run(
      "ncclSend/ncclRecv",
      [&] {
        ncclResult_t g = ncclGroupStart();
        if (g != ncclSuccess) return g;
        g = ncclSend(a, kCount, ncclFloat32, 0, comm, stream);
        ncclResult_t h = ncclRecv(b, kCount, ncclFloat32, 0, comm, stream);
        ncclResult_t end = ncclGroupEnd();
        if (g != ncclSuccess && g != ncclInProgress) return g;
        if (h != ncclSuccess && h != ncclInProgress) return h;
        return end;
      },
      b);
  if (!error.empty()) return fail_rest(error);
  report.Ok(name(kNames[at++]), "4 MiB to itself in one group, bit for bit");
  r = AwaitComm(comm, ncclCommFinalize(comm), MonoNow() + timeout);
  if (r != ncclSuccess) {
    return fail_rest(r == ncclInProgress ? "ncclCommFinalize: not done by the "
                                           "deadline"
                                         : NcclError("ncclCommFinalize", r));
  }
  std::move(abort).Cancel();
  if (ncclResult_t d = ncclCommDestroy(comm); d != ncclSuccess) {
    return fail_rest(NcclError("ncclCommDestroy", d));
  }
  report.Ok(name(kNames[at++]), "finalized and destroyed");
  return true;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "checks CUDA, CUDA IPC, memory pools and NCCL before shardd runs");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "gpu_preflight: unexpected argument %s\n", rest[1]);
    return 2;
  }
  const int device = absl::GetFlag(FLAGS_device);
  const int64_t timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (timeout_s <= 0) {
    std::fprintf(stderr, "gpu_preflight: --timeout_s must be > 0\n");
    return 2;
  }
  const absl::Duration timeout = absl::Seconds(timeout_s);
  if (const std::string hex = absl::GetFlag(FLAGS_ipc_child); !hex.empty()) {
    return IpcChild(hex, absl::GetFlag(FLAGS_ipc_bytes), device);
  }
  PreflightReport report(stdout);
  if (absl::GetFlag(FLAGS_nccl_retry)) {
    CheckNccl(report, device, timeout, /*have_device=*/true,
              " (retry, NCCL_DEBUG=INFO)");
    return report.exit_code();
  }
  const bool have_device = CheckDevice(report, device);
  const char* const kDeviceChecks[] = {"kernel", "memory-pool", "cuda-ipc"};
  if (have_device) {
    CheckKernel(report, MonoNow() + timeout);
    CheckMemoryPool(report, MonoNow() + timeout);
    CheckIpc(report, device, timeout);
  } else {
    for (const char* n : kDeviceChecks) {
      report.NotRun(n, "no usable CUDA device");
    }
  }
  if (!CheckNccl(report, device, timeout, have_device, "") && have_device) {
    // The retry's own lines follow; NCCL's log goes to stderr.
    absl::StatusOr<int> retry =
        RunSelf({"--nccl_retry", absl::StrCat("--device=", device),
                 absl::StrCat("--timeout_s=", timeout_s)},
                {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,ENV,NET,ALLOC"},
                MonoNow() + 4 * timeout + absl::Seconds(10));
    std::printf("gpu_preflight: NCCL retry with NCCL_DEBUG=INFO: %s\n",
                retry.ok() ? absl::StrCat("exit ", *retry).c_str()
                           : retry.status().ToString().c_str());
  }
  std::printf("gpu_preflight: %d ok, %d failed: %s\n", report.passes(),
              report.failures(), report.all_passed() ? "PASS" : "FAIL");
  return report.exit_code();
}

}  // namespace
}  // namespace shardd::tools

int main(int argc, char** argv) { return shardd::tools::Main(argc, argv); }
