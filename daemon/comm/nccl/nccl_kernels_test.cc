// Needs a GPU: tagged "gpu" and built only with --config=cuda. The NCCL
// backend's conversion kernels against their CPU twins in core/dtype.h, bit
// for bit, and a launch's result not confused with an earlier error.
#include "daemon/comm/nccl/nccl_kernels.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "daemon/core/dtype.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl::cuda {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Values where conversions differ if done carelessly: NaNs with payloads and
// both signs, infinities, signed zeros, fp16/bf16 subnormals and overflow,
// ties to even.
std::vector<float> Awkward() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.5f,
                          65504.0f,
                          65520.0f,  // rounds to fp16 infinity
                          1e-7f,     // fp16 subnormal
                          5.96e-8f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          FromBits(0x7fc00000u),  // canonical quiet NaN
                          FromBits(0xffc00000u),  // negative quiet NaN
                          FromBits(0x7fa5a000u),  // quiet NaN, payload
                          FromBits(0xff812000u),  // payload, negative
                          FromBits(0x7f800001u),  // signalling NaN
                          1.0009765625f,          // fp16 tie
                          1.00048828125f,         // fp16 tie to even
                          1.00390625f};           // bf16 tie
  for (int i = 0; i < 256; ++i) v.push_back(FromBits(0x3f800000u + i * 4099u));
  return v;
}

class NcclKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess)
        << "this test needs a GPU";
    ASSERT_GT(devices, 0);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
};

std::vector<uint16_t> Downcast(const std::vector<float>& in, HalfType type) {
  void* src_bytes = nullptr;
  void* dst = nullptr;
  EXPECT_EQ(cudaMalloc(&src_bytes, in.size() * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dst, in.size() * 2), cudaSuccess);
  float* src = static_cast<float*>(src_bytes);
  EXPECT_EQ(cudaMemcpy(src, in.data(), in.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(LaunchDowncast(src, dst, type, static_cast<int64_t>(in.size()),
                           /*stream=*/nullptr),
            0);
  std::vector<uint16_t> out(in.size());
  EXPECT_EQ(cudaMemcpy(out.data(), dst, out.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(src);
  cudaFree(dst);
  return out;
}

TEST_F(NcclKernelsTest, Fp16DowncastMatchesTheHostBitForBitNaNsIncluded) {
  const std::vector<float> in = Awkward();
  const std::vector<uint16_t> got = Downcast(in, HalfType::kFloat16);
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    EXPECT_EQ(got[i], core::FloatToHalf(in[i]))
        << "input bits 0x" << std::hex << bits;
  }
}

TEST_F(NcclKernelsTest, Bf16DowncastMatchesTheHostBitForBitNaNsIncluded) {
  const std::vector<float> in = Awkward();
  const std::vector<uint16_t> got = Downcast(in, HalfType::kBFloat16);
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    EXPECT_EQ(got[i], core::FloatToBFloat16(in[i]))
        << "input bits 0x" << std::hex << bits;
  }
}

// Issue #28 (7): an earlier failed call of this thread, already reported to
// its caller, must not be reported again as the next launch's failure.
TEST_F(NcclKernelsTest, EarlierErrorIsNotBlamedOnAHealthyLaunch) {
  void* bytes = nullptr;
  ASSERT_EQ(cudaMalloc(&bytes, 64 * 4), cudaSuccess);
  float* data = static_cast<float*>(bytes);
  ASSERT_NE(cudaSetDevice(1 << 20), cudaSuccess);  // leaves a last error
  EXPECT_EQ(LaunchDivide(data, 2, 64, /*stream=*/nullptr), 0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(data);
}

}  // namespace
}  // namespace shardd::comm::nccl::cuda
