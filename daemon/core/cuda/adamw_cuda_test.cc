// Needs a GPU: tagged "gpu" and built only with --config=cuda. Run with
//   bazel test --config=cuda --test_tag_filters=gpu //...
#include "daemon/core/cuda/adamw_cuda.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <random>
#include <vector>

#include "daemon/core/adamw.h"
#include "gtest/gtest.h"

namespace shardd::core::cuda {
namespace {

TEST(AdamWCudaTest, GpuUpdateEqualsCpuUpdateBitForBit) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess)
      << "this test needs a GPU";
  ASSERT_GT(devices, 0);
  constexpr int64_t kN = (1 << 20) + 37;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> grad(kN), param(kN), m(kN), v(kN);
  for (int64_t i = 0; i < kN; ++i) {
    grad[i] = normal(rng);
    param[i] = normal(rng);
    m[i] = 0.1f * normal(rng);
    v[i] = std::abs(0.01f * normal(rng));
  }
  auto adamw = AdamW::Create({});
  ASSERT_TRUE(adamw.ok());
  const size_t bytes = kN * sizeof(float);
  float* buffers[4] = {};
  for (float*& b : buffers) {
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    b = static_cast<float*>(p);
  }
  auto [d_grad, d_param, d_m, d_v] = buffers;
  cudaMemcpy(d_grad, grad.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(d_param, param.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(d_m, m.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(d_v, v.data(), bytes, cudaMemcpyHostToDevice);
  for (int64_t step = 1; step <= 3; ++step) {
    const float scale = step == 2 ? 0.5f : 1.0f;
    ASSERT_TRUE(adamw
                    ->Update(step, scale, grad.data(), param.data(), m.data(),
                             v.data(), kN, DType::kFloat32, nullptr)
                    .ok());
    ASSERT_EQ(LaunchAdamW(adamw->ScalarsFor(step, scale), d_grad, d_param, d_m,
                          d_v, kN, nullptr),
              0);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> gpu(kN);
  for (auto [device, host] :
       {std::pair{d_param, &param}, std::pair{d_m, &m}, std::pair{d_v, &v}}) {
    cudaMemcpy(gpu.data(), device, bytes, cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::memcmp(gpu.data(), host->data(), bytes), 0);
  }
  for (float* b : buffers) cudaFree(b);
}

}  // namespace
}  // namespace shardd::core::cuda
