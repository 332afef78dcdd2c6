// Needs a GPU: tagged "gpu" and built only with --config=cuda. Run with
//   bazel test --config=cuda --test_tag_filters=gpu //...
#include "daemon/node/cuda/cuda_engine_math.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "daemon/core/adamw.h"
#include "daemon/core/dtype.h"
#include "daemon/core/grad_clip.h"
#include "daemon/core/sgd.h"
#include "daemon/node/cuda/spin_kernel.h"
#include "daemon/node/host_engine_math.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

using core::DType;

constexpr int64_t kN = (int64_t{1} << 18) + 37;

std::vector<float> Random(uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(kN);
  for (float& x : v) x = normal(rng);
  return v;
}

class CudaEngineMathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto math = CudaEngineMath::Create(0);
    ASSERT_TRUE(math.ok()) << "this test needs a GPU: " << math.status();
    gpu_ = *std::move(math);
  }
  // A device copy of `host`.
  std::unique_ptr<memory::ByteBuffer> OnDevice(const void* host,
                                               int64_t bytes) {
    auto b = gpu_->AllocateScratch("test", bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(gpu_->Upload((*b)->data(), host, bytes).ok());
    return *std::move(b);
  }
  template <typename T>
  std::vector<T> Back(memory::ByteBuffer& b, int64_t n) {
    std::vector<T> out(n);
    EXPECT_TRUE(gpu_->Download(out.data(), b.data(), n * sizeof(T)).ok());
    return out;
  }

  std::shared_ptr<CudaEngineMath> gpu_;
  HostEngineMath host_;
};

// Issue #28 (5): what the engine does on the request path while a
// collective may be running (a prefetch all-gather) must not wait for the
// whole device. A kernel spinning on another stream stands in for the
// collective; every call must return while it still runs. If one waited
// for the device, it could return only after the watchdog released the
// spinner (then the test fails instead of hanging).
TEST_F(CudaEngineMathTest, RequestPathNeverWaitsForTheWholeDevice) {
  const std::vector<float> grad = Random(5, 1.0f);
  std::unique_ptr<memory::ByteBuffer> src =
      OnDevice(grad.data(), kN * int64_t{sizeof(float)});
  int* flag = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int),
                          cudaHostAllocMapped),
            cudaSuccess);
  *flag = 0;
  int* flag_on_device = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_on_device),
                                     flag, 0),
            cudaSuccess);
  cudaStream_t busy = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking),
            cudaSuccess);
  ASSERT_EQ(cuda::LaunchSpinUntilFlag(flag_on_device, busy), 0);
  std::atomic<bool> released_by_watchdog{false};
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 300 && !done.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!done.load()) {
      released_by_watchdog = true;
      reinterpret_cast<volatile int*>(flag)[0] = 1;
    }
  });

  // An accumulation buffer made, used (the kernel's first launch in this
  // process), rounded back and dropped; GatherState-like scratch too.
  auto acc = gpu_->AllocateScratch("unit.accumulation", kN * 4);
  ASSERT_TRUE(acc.ok()) << acc.status();
  EXPECT_TRUE(gpu_->Accumulate(reinterpret_cast<float*>((*acc)->data()),
                               src->data(), DType::kFloat32, kN,
                               /*first=*/true)
                  .ok());
  auto scratch = gpu_->AllocateScratch("gather_state", kN * 4);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  acc->reset();
  scratch->reset();
  const bool still_spinning = cudaStreamQuery(busy) == cudaErrorNotReady;

  done = true;
  reinterpret_cast<volatile int*>(flag)[0] = 1;
  watchdog.join();
  EXPECT_EQ(cudaStreamSynchronize(busy), cudaSuccess);
  cudaStreamDestroy(busy);
  cudaFreeHost(flag);
  EXPECT_TRUE(still_spinning);
  EXPECT_FALSE(released_by_watchdog)
      << "a call waited for the whole device while a kernel ran";
}

TEST_F(CudaEngineMathTest, AccumulateAndRoundingEqualTheHostBitForBit) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const std::vector<float> a = Random(1, 1.0f), b = Random(2, 1.0f);
    std::vector<uint16_t> low(kN);
    if (dtype != DType::kFloat32) {
      ASSERT_TRUE(host_.ToLowPrecision(b.data(), low.data(), dtype, kN).ok());
    }
    const void* src = dtype == DType::kFloat32
                          ? static_cast<const void*>(b.data())
                          : static_cast<const void*>(low.data());
    const int64_t src_bytes = kN * core::DTypeSize(dtype);
    std::vector<float> want = a;
    ASSERT_TRUE(host_.Accumulate(want.data(), src, dtype, kN, false).ok());
    auto acc = OnDevice(a.data(), kN * 4);
    auto dsrc = OnDevice(src, src_bytes);
    ASSERT_TRUE(gpu_->Accumulate(reinterpret_cast<float*>(acc->data()),
                                 dsrc->data(), dtype, kN, false)
                    .ok());
    EXPECT_EQ(Back<float>(*acc, kN), want) << core::DTypeName(dtype);
    // AddRounded back into the source's dtype.
    std::vector<uint8_t> host_dst(src_bytes);
    std::memcpy(host_dst.data(), src, src_bytes);
    ASSERT_TRUE(host_.AddRounded(host_dst.data(), dtype, a.data(), kN).ok());
    auto add = OnDevice(a.data(), kN * 4);
    ASSERT_TRUE(gpu_->AddRounded(dsrc->data(), dtype,
                                 reinterpret_cast<float*>(add->data()), kN)
                    .ok());
    EXPECT_EQ(Back<uint8_t>(*dsrc, src_bytes), host_dst)
        << core::DTypeName(dtype);
  }
}

// The 16-bit copies of edge values: NaNs with a sign and a payload (the
// hardware's fp16 conversion would canonicalise them), infinities, values
// that overflow fp16, subnormals, signed zeros and exact halfway cases.
TEST_F(CudaEngineMathTest, LowPrecisionCopiesOfEdgeValuesEqualTheHost) {
  auto from_bits = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  };
  const std::vector<float> edges = {
      from_bits(0x7fc00001u),
      from_bits(0xffc12345u),
      from_bits(0x7f800001u),
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      65504.0f,
      65519.0f,
      65520.0f,
      -70000.0f,
      1e-8f,
      -3e-6f,
      6.0e-8f,
      2.98e-8f,
      0.0f,
      -0.0f,
      from_bits(0x3f808000u),  // bf16 halfway, rounds to even
      from_bits(0x3f818000u),  // bf16 halfway, rounds up
      1.0f + 1.0f / 2048.0f,   // fp16 halfway
      std::numeric_limits<float>::denorm_min(),
      std::numeric_limits<float>::max()};
  const int64_t n = static_cast<int64_t>(edges.size());
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<uint16_t> want(n);
    ASSERT_TRUE(host_.ToLowPrecision(edges.data(), want.data(), dtype, n).ok());
    auto in = OnDevice(edges.data(), n * 4);
    auto out = gpu_->AllocateScratch("out", n * 2);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(gpu_->ToLowPrecision(reinterpret_cast<float*>(in->data()),
                                     (*out)->data(), dtype, n)
                    .ok());
    EXPECT_EQ(Back<uint16_t>(**out, n), want) << core::DTypeName(dtype);
  }
}

TEST_F(CudaEngineMathTest, GradientNormPartialEqualsTheHostExactly) {
  std::vector<float> g = Random(3, 1e-3f);
  g[5] = 3e38f;
  g[6] = 1e-40f;                                   // Subnormal.
  g.insert(g.end(), size_t{1} << 17, 1.9999999f);  // Bins past 64 bits.
  auto d = OnDevice(g.data(), g.size() * 4);
  core::GradNormPartial gpu, host;
  ASSERT_TRUE(gpu_->SquaresInto(reinterpret_cast<const float*>(d->data()),
                                g.size(), &gpu)
                  .ok());
  ASSERT_TRUE(host_.SquaresInto(g.data(), g.size(), &host).ok());
  EXPECT_EQ(gpu.limbs, host.limbs);
  EXPECT_EQ(gpu.elements, host.elements);
}

TEST_F(CudaEngineMathTest, OptimizersEqualTheHostBitForBitWithBf16Copies) {
  const std::vector<float> grad = Random(4, 1.0f), param0 = Random(5, 1.0f);
  auto adamw = core::AdamW::Create({.lr = 1e-3, .weight_decay = 0.1});
  ASSERT_TRUE(adamw.ok());
  core::SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  so.weight_decay = 1e-4;
  so.nesterov = true;
  auto sgd = core::Sgd::Create(so);
  ASSERT_TRUE(sgd.ok());
  for (int64_t step : {1, 2}) {
    std::vector<float> p = param0, m(kN, 0.01f), v(kN, 0.02f);
    std::vector<uint16_t> low(kN);
    ASSERT_TRUE(host_
                    .AdamW(*adamw, step, 0.5f, grad.data(), p.data(), m.data(),
                           v.data(), kN, DType::kBFloat16, low.data())
                    .ok());
    std::vector<float> m0(kN, 0.01f), v0(kN, 0.02f);
    auto dg = OnDevice(grad.data(), kN * 4),
         dp = OnDevice(param0.data(), kN * 4), dm = OnDevice(m0.data(), kN * 4),
         dv = OnDevice(v0.data(), kN * 4);
    auto dl = gpu_->AllocateScratch("low", kN * 2);
    ASSERT_TRUE(dl.ok());
    auto f = [](memory::ByteBuffer& b) {
      return reinterpret_cast<float*>(b.data());
    };
    ASSERT_TRUE(gpu_->AdamW(*adamw, step, 0.5f, f(*dg), f(*dp), f(*dm), f(*dv),
                            kN, DType::kBFloat16, (*dl)->data())
                    .ok());
    EXPECT_EQ(Back<float>(*dp, kN), p) << "adamw step " << step;
    EXPECT_EQ(Back<float>(*dv, kN), v) << "adamw step " << step;
    EXPECT_EQ(Back<uint16_t>(**dl, kN), low) << "adamw step " << step;

    std::vector<float> sp = param0, buf(kN, 0.3f);
    ASSERT_TRUE(host_
                    .Sgd(*sgd, step, 0.5f, grad.data(), sp.data(), buf.data(),
                         kN, DType::kBFloat16, nullptr)
                    .ok());
    std::vector<float> buf0(kN, 0.3f);
    auto sdp = OnDevice(param0.data(), kN * 4),
         db = OnDevice(buf0.data(), kN * 4);
    ASSERT_TRUE(gpu_->Sgd(*sgd, step, 0.5f, f(*dg), f(*sdp), f(*db), kN,
                          DType::kBFloat16, nullptr)
                    .ok());
    EXPECT_EQ(Back<float>(*sdp, kN), sp) << "sgd step " << step;
    EXPECT_EQ(Back<float>(*db, kN), buf) << "sgd step " << step;
  }
}

}  // namespace
}  // namespace shardd::node
