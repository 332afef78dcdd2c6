#include "daemon/state/safetensors_reader.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::state {
namespace {

using ::testing::HasSubstr;

class SafetensorsReaderTest : public ::testing::Test {
 protected:
  // Writes a file: 8-byte length, header, data; returns its path.
  std::string Write(const std::string& name, const std::string& header,
                    const std::string& data) {
    std::string prefix(8, '\0');
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(n >> (8 * i));
    return WriteRaw(name, prefix + header + data);
  }
  std::string WriteRaw(const std::string& name, const std::string& bytes) {
    const std::string path =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  static std::string Floats(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()),
                       v.size() * sizeof(float));
  }
};

TEST_F(SafetensorsReaderTest, ReadsFileWrittenByPythonByName) {
  const std::string path = absl::StrCat(
      std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
      "/daemon/state/testdata/pytorch_style.safetensors");
  absl::StatusOr<SafetensorsReader> r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metadata().at("format"), "pt");
  EXPECT_EQ(r->tensors().size(), 5u);

  auto w = r->Expect("l0.weight", {3, 4});
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<float> out(12);
  ASSERT_TRUE(r->ReadFloats(**w, 0, 12, out.data()).ok());
  for (int k = 0; k < 12; ++k) EXPECT_EQ(out[k], k * 0.5f - 2) << k;
  // A range in the middle, as a shard reads it.
  ASSERT_TRUE(r->ReadFloats(**w, 5, 3, out.data()).ok());
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[2], 1.5f);

  auto b = r->Expect("l0.bias", {4});
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(r->ReadFloats(**b, 1, 3, out.data()).ok());
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[2], 4.0f);

  auto h = r->Expect("l1.weight", {2, 3});
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(r->ReadFloats(**h, 0, 6, out.data()).ok());
  for (int k = 0; k < 6; ++k) EXPECT_EQ(out[k], k * 0.25f) << k;

  auto d = r->Expect("l1.bias", {3});
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(r->ReadFloats(**d, 0, 3, out.data()).ok());
  EXPECT_EQ(out[2], -2.0f);
}

TEST_F(SafetensorsReaderTest, RejectsWrongDtypeNamingFileAndTensor) {
  const std::string path = absl::StrCat(
      std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
      "/daemon/state/testdata/pytorch_style.safetensors");
  absl::StatusOr<SafetensorsReader> r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  auto s = r->Expect("step_count", {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("'step_count' has dtype I64"));
  EXPECT_THAT(s.status().message(), HasSubstr(path));
}

TEST_F(SafetensorsReaderTest, RejectsWrongShape) {
  const std::string path = Write(
      "shape", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      Floats({1, 2}));
  absl::StatusOr<SafetensorsReader> r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  auto t = r->Expect("a", {1, 2});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              HasSubstr("tensor 'a' has shape [2], expected [1,2]"));
}

TEST_F(SafetensorsReaderTest, RejectsMissingTensor) {
  const std::string path = Write(
      "missing", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      Floats({1, 2}));
  absl::StatusOr<SafetensorsReader> r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  auto t = r->Expect("b", {2});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr(path + ": no tensor 'b'"));
}

TEST_F(SafetensorsReaderTest, RejectsMissingFile) {
  auto r = SafetensorsReader::Open("/nonexistent/x.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/x.safetensors"));
}

TEST_F(SafetensorsReaderTest, RejectsTruncatedFile) {
  // The data area ends before the tensor's end offset.
  const std::string path = Write(
      "truncated", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
      Floats({1, 2}));
  auto r = SafetensorsReader::Open(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(path + ": tensor 'a'"));
  // Shorter than the length prefix.
  auto tiny = SafetensorsReader::Open(WriteRaw("tiny", "abc"));
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(tiny.status().message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsReaderTest, RejectsHeaderLengthBeyondFile) {
  std::string prefix(8, '\0');
  prefix[0] = static_cast<char>(0x40);
  prefix[1] = 0x01;  // 320 bytes of header claimed.
  auto r = SafetensorsReader::Open(WriteRaw("hlen", prefix + "{}"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("header length 320"));
  std::string huge(8, '\xff');
  auto h = SafetensorsReader::Open(WriteRaw("hhuge", huge + "{}"));
  EXPECT_EQ(h.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SafetensorsReaderTest, RejectsOverlappingOffsets) {
  const std::string path =
      Write("overlap",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            Floats({1, 2, 3}));
  auto r = SafetensorsReader::Open(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("'a' and 'b' overlap"));
}

TEST_F(SafetensorsReaderTest, RejectsOutOfRangeAndInconsistentOffsets) {
  auto backwards = SafetensorsReader::Open(Write(
      "backwards", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
      Floats({1, 2, 3})));
  EXPECT_EQ(backwards.status().code(), absl::StatusCode::kDataLoss);
  auto size = SafetensorsReader::Open(
      Write("size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
            Floats({1, 2, 3})));
  EXPECT_EQ(size.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(size.status().message(), HasSubstr("needs 12"));
  auto negative = SafetensorsReader::Open(Write(
      "negative", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
      Floats({1})));
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SafetensorsReaderTest, RejectsBadJson) {
  for (const std::string& header :
       {std::string(R"({"a":{"dtype":"F32","shape":[1],)"),
        std::string("not json"), std::string(R"(["a"])"),
        std::string(R"({"a":{"dtype":"F32","shape":[1]}})"),
        std::string(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})"),
        std::string(R"({"__metadata__":{"k":1}})"),
        std::string(
            R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})")}) {
    auto r = SafetensorsReader::Open(Write("badjson", header, Floats({1})));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << header;
  }
}

TEST_F(SafetensorsReaderTest, RejectsDuplicateTensorNames) {
  auto r = SafetensorsReader::Open(
      Write("dup",
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            Floats({1, 2})));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
}

TEST_F(SafetensorsReaderTest, RejectsReadOutsideTensorAndShrunkFile) {
  const std::string path = Write(
      "shrink", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
      Floats({1, 2, 3, 4}));
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const SafetensorsTensor& a = *r->Find("a");
  float out[4];
  EXPECT_EQ(r->ReadFloats(a, 3, 2, out).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(truncate(path.c_str(), r->file_bytes() - 4), 0);
  absl::Status s = r->ReadFloats(a, 0, 4, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path));
}

// A file of `n` fp32 values v(i), one tensor "w" [n].
std::string OneTensor(int64_t n, float (*v)(int64_t)) {
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = v(i);
  return std::string(reinterpret_cast<const char*>(values.data()), n * 4);
}

std::string OneTensorHeader(int64_t n) {
  return absl::StrCat(R"({"w":{"dtype":"F32","shape":[)", n,
                      R"(],"data_offsets":[0,)", n * 4, "]}}");
}

TEST_F(SafetensorsReaderTest, FingerprintIsTheContentsNotThePath) {
  constexpr int64_t kN = 1000;
  auto ramp = [](int64_t i) { return static_cast<float>(i); };
  const std::string a = Write("fp_a", OneTensorHeader(kN), OneTensor(kN, ramp));
  const std::string copy =
      Write("fp_copy", OneTensorHeader(kN), OneTensor(kN, ramp));
  auto ra = SafetensorsReader::Open(a);
  auto rc = SafetensorsReader::Open(copy);
  ASSERT_TRUE(ra.ok() && rc.ok());
  auto fa = ra->SampledFingerprint();
  auto fc = rc->SampledFingerprint();
  ASSERT_TRUE(fa.ok() && fc.ok());
  EXPECT_EQ(*fa, *fc) << "a byte-identical copy elsewhere";
}

TEST_F(SafetensorsReaderTest, FingerprintOfASmallFileSeesEveryValue) {
  // Up to kFingerprintSamples blocks the samples cover the whole data: one
  // changed element anywhere changes the fingerprint.
  constexpr int64_t kN = 40000;  // 160,000 bytes: 40 blocks.
  static_assert(kN * 4 <= SafetensorsReader::kFingerprintSamples *
                              SafetensorsReader::kFingerprintBlockBytes);
  auto ramp = [](int64_t i) { return static_cast<float>(i); };
  const std::string base =
      Write("fp_base", OneTensorHeader(kN), OneTensor(kN, ramp));
  auto rb = SafetensorsReader::Open(base);
  ASSERT_TRUE(rb.ok());
  auto fb = rb->SampledFingerprint();
  ASSERT_TRUE(fb.ok());
  for (int64_t changed : {int64_t{0}, int64_t{12345}, int64_t{20000}, kN - 1}) {
    std::string data = OneTensor(kN, ramp);
    float x = -1.0f;
    std::memcpy(data.data() + changed * 4, &x, 4);
    const std::string path =
        Write(absl::StrCat("fp_", changed), OneTensorHeader(kN), data);
    auto r = SafetensorsReader::Open(path);
    ASSERT_TRUE(r.ok());
    auto f = r->SampledFingerprint();
    ASSERT_TRUE(f.ok());
    EXPECT_NE(*f, *fb) << "element " << changed;
  }
}

TEST_F(SafetensorsReaderTest, FingerprintOfALargeFileTellsOtherValuesApart) {
  // Two fine-tunes of one architecture: same header, other values.
  constexpr int64_t kN = 1 << 20;  // 4 MiB: 1024 blocks, 64 sampled.
  const std::string a =
      Write("fp_large_a", OneTensorHeader(kN),
            OneTensor(kN, [](int64_t i) { return static_cast<float>(i); }));
  const std::string b = Write(
      "fp_large_b", OneTensorHeader(kN),
      OneTensor(kN, [](int64_t i) { return static_cast<float>(i) + 0.5f; }));
  auto ra = SafetensorsReader::Open(a);
  auto rb = SafetensorsReader::Open(b);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->header_crc32c(), rb->header_crc32c());
  auto fa = ra->SampledFingerprint();
  auto fb = rb->SampledFingerprint();
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_NE(*fa, *fb);
}

TEST_F(SafetensorsReaderTest, FingerprintOfAFileCutAfterOpeningIsDataLoss) {
  constexpr int64_t kN = 4096;
  const std::string path =
      Write("fp_cut", OneTensorHeader(kN),
            OneTensor(kN, [](int64_t i) { return static_cast<float>(i); }));
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(truncate(path.c_str(), 100), 0);
  auto f = r->SampledFingerprint();
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << f.status();
  EXPECT_THAT(f.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace shardd::state
