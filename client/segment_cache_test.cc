#include "client/segment_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/memory/shared_memory_segment.h"
#include "gtest/gtest.h"

namespace shardd::client {
namespace {

class SegmentCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/segment_cache_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto segment = memory::SharedMemorySegment::Create(dir_, "seg", 4096);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_.emplace(std::move(*segment));
    float* f = static_cast<float*>(segment_->mutable_data());
    for (int i = 0; i < 1024; ++i) f[i] = static_cast<float>(i);
  }
  void TearDown() override {
    segment_.reset();
    rmdir(dir_.c_str());
  }

  // A unit "weight" {2, 3} then "bias" {2} at byte offset 64 of the
  // segment, with 2 floats of padding (range of 10 floats).
  v1::DataRef UnitRef() const {
    v1::DataRef ref;
    v1::SharedMemoryRef* shm = ref.mutable_shared_memory();
    shm->set_path(segment_->path());
    shm->set_segment_bytes(4096);
    shm->set_byte_offset(64);
    shm->set_byte_length(40);
    shm->set_generation(1);
    ref.set_dtype(v1::DTYPE_FP32);
    ref.set_byte_length(40);
    v1::TensorView* w = ref.add_views();
    w->set_name("weight");
    w->add_shape(2);
    w->add_shape(3);
    w->set_dtype(v1::DTYPE_FP32);
    w->set_byte_offset(0);
    w->set_numel(6);
    v1::TensorView* b = ref.add_views();
    b->set_name("bias");
    b->add_shape(2);
    b->set_dtype(v1::DTYPE_FP32);
    b->set_byte_offset(24);
    b->set_numel(2);
    return ref;
  }

  std::string dir_;
  std::optional<memory::SharedMemorySegment> segment_;
};

TEST_F(SegmentCacheTest, ReadViewPointsAtTheRangeAndItsTensors) {
  SegmentCache cache;
  auto view = cache.ReadView(UnitRef(), "params");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->flat.size(), 10u);
  EXPECT_EQ(view->flat[0], 16.0f);  // byte 64 = float 16.
  ASSERT_EQ(view->tensors.size(), 2u);
  EXPECT_EQ(view->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(view->tensor("weight").size(), 6u);
  ASSERT_EQ(view->tensor("bias").size(), 2u);
  EXPECT_EQ(view->tensor("bias")[0], 22.0f);
  EXPECT_TRUE(view->tensor("nope").empty());
}

TEST_F(SegmentCacheTest, WriteViewWritesTheDaemonsBytes) {
  SegmentCache cache;
  auto view = cache.WriteView(UnitRef(), "grad_buffer");
  ASSERT_TRUE(view.ok()) << view.status();
  view->tensor("bias")[1] = -5.0f;
  EXPECT_EQ(static_cast<const float*>(segment_->data())[16 + 7], -5.0f);
}

TEST_F(SegmentCacheTest, MapsEachSegmentOncePerGeneration) {
  SegmentCache cache;
  ASSERT_TRUE(cache.ReadView(UnitRef(), "params").ok());
  ASSERT_TRUE(cache.ReadView(UnitRef(), "params").ok());
  EXPECT_EQ(cache.map_count(), 1);
  v1::DataRef next = UnitRef();
  next.mutable_shared_memory()->set_generation(2);
  auto old_view = cache.ReadView(UnitRef(), "params");
  ASSERT_TRUE(old_view.ok());
  ASSERT_TRUE(cache.ReadView(next, "params").ok());
  EXPECT_EQ(cache.map_count(), 2);  // A new generation is mapped anew.
  ASSERT_TRUE(cache.ReadView(next, "params").ok());
  EXPECT_EQ(cache.map_count(), 2);
  EXPECT_EQ(cache.mapped_segments(), 1);
  cache.Clear();
  EXPECT_EQ(cache.mapped_segments(), 0);
  EXPECT_EQ(old_view->flat[0], 16.0f);  // Kept alive by the view.
}

// What a trainer does before registering again: GPU handles go, the
// shared-memory mappings and the views handed out stay.
TEST_F(SegmentCacheTest, ForgettingDeviceBuffersKeepsSharedMemoryMappings) {
  SegmentCache cache;
  auto view = cache.ReadView(UnitRef(), "params");
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(cache.ForgetDeviceBuffers().ok());
  EXPECT_EQ(cache.mapped_segments(), 1);
  EXPECT_EQ(view->flat[0], 16.0f);
  ASSERT_TRUE(cache.ReadView(UnitRef(), "params").ok());
  EXPECT_EQ(cache.map_count(), 1);  // Not mapped again.
}

// Issue #28 (9): a trainer that wrote a GPU slot's device_data must not have
// its gradients overwritten by the zeroed host copy at Flush().
TEST_F(SegmentCacheTest, DeviceWrittenSlotIsSynchronisedNotOverwritten) {
  const GradFlushAction host = GradFlushActionFor(GradWriter::kHost);
  EXPECT_TRUE(host.upload_host_copy);
  EXPECT_FALSE(host.synchronize_device);
  const GradFlushAction device = GradFlushActionFor(GradWriter::kDevice);
  EXPECT_FALSE(device.upload_host_copy);
  EXPECT_TRUE(device.synchronize_device);
}

// In shared memory the host view is the slot itself, whoever writes it.
TEST_F(SegmentCacheTest, SharedMemorySlotIsTheSameForEitherWriter) {
  SegmentCache cache;
  auto host = cache.WriteView(UnitRef(), "grad_buffer", GradWriter::kHost);
  auto device = cache.WriteView(UnitRef(), "grad_buffer", GradWriter::kDevice);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(host->flat.data(), device->flat.data());
  EXPECT_EQ(device->device_data, nullptr);
  EXPECT_TRUE(device->Flush().ok());
}

TEST_F(SegmentCacheTest, RangeBeyondTheSegmentIsInvalidArgument) {
  SegmentCache cache;
  v1::DataRef ref = UnitRef();
  ref.mutable_shared_memory()->set_byte_offset(4096 - 36);
  auto view = cache.ReadView(ref, "params");
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(view.status().message().find("does not fit the segment"),
            std::string::npos)
      << view.status();
  EXPECT_EQ(cache.map_count(), 0);
}

TEST_F(SegmentCacheTest, ViewBeyondTheRangeIsInvalidArgumentNamingIt) {
  SegmentCache cache;
  v1::DataRef ref = UnitRef();
  ref.mutable_views(1)->set_byte_offset(36);
  auto view = cache.ReadView(ref, "params");
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(view.status().message().find("params.views[1].byte_offset"),
            std::string::npos)
      << view.status();
}

TEST_F(SegmentCacheTest, MismatchedNumelOrDtypeIsInvalidArgument) {
  SegmentCache cache;
  v1::DataRef ref = UnitRef();
  ref.mutable_views(0)->set_numel(5);
  EXPECT_EQ(cache.ReadView(ref, "params").status().code(),
            absl::StatusCode::kInvalidArgument);
  ref = UnitRef();
  ref.set_dtype(v1::DTYPE_BF16);
  EXPECT_EQ(cache.ReadView(ref, "params").status().code(),
            absl::StatusCode::kInvalidArgument);
  ref = UnitRef();
  ref.set_byte_length(44);
  EXPECT_EQ(cache.ReadView(ref, "params").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SegmentCacheTest, FileShorterThanAnnouncedIsDataLoss) {
  SegmentCache cache;
  v1::DataRef ref = UnitRef();
  ref.mutable_shared_memory()->set_segment_bytes(8192);
  auto view = cache.ReadView(ref, "params");
  EXPECT_EQ(view.status().code(), absl::StatusCode::kDataLoss) << view.status();
}

TEST_F(SegmentCacheTest, MissingFileIsNotFound) {
  SegmentCache cache;
  v1::DataRef ref = UnitRef();
  ref.mutable_shared_memory()->set_path(absl::StrCat(dir_, "/gone"));
  EXPECT_EQ(cache.ReadView(ref, "params").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SegmentCacheTest, InlineRefsAreUnimplemented) {
  SegmentCache cache;
  v1::DataRef ref;
  ref.set_inline_data("abcd");
  EXPECT_EQ(cache.ReadView(ref, "params").status().code(),
            absl::StatusCode::kUnimplemented);
}

// A GPU buffer's ref is checked like a segment's (handle, range, views);
// a CPU build then says plainly that it cannot reach GPU memory.
TEST_F(SegmentCacheTest, CudaRefsAreCheckedThenNeedACudaBuild) {
  SegmentCache cache;
  v1::DataRef ref = UnitRef();
  v1::CudaIpcRef* cuda = ref.mutable_cuda_ipc();  // Replaces shared_memory.
  cuda->set_mem_handle(std::string(64, '\x5a'));
  cuda->set_device_ordinal(0);
  cuda->set_allocation_bytes(4096);
  cuda->set_byte_offset(0);
  cuda->set_byte_length(ref.byte_length());
  const absl::Status ok_ref = cache.ReadView(ref, "params").status();
  EXPECT_EQ(ok_ref.code(), absl::StatusCode::kUnimplemented) << ok_ref;
  EXPECT_NE(ok_ref.message().find("built without CUDA"), std::string::npos)
      << ok_ref;
  EXPECT_EQ(cache.WriteView(ref, "grad").status().code(),
            absl::StatusCode::kUnimplemented);
  v1::DataRef short_handle = ref;
  short_handle.mutable_cuda_ipc()->set_mem_handle("x");
  EXPECT_NE(cache.ReadView(short_handle, "params")
                .status()
                .message()
                .find("params.cuda_ipc.mem_handle: must be 64 bytes"),
            std::string::npos);
  v1::DataRef outside = ref;
  outside.mutable_cuda_ipc()->set_byte_offset(4092);
  const absl::Status range = cache.ReadView(outside, "params").status();
  EXPECT_EQ(range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(range.message().find("does not fit the allocation"),
            std::string::npos)
      << range;
  EXPECT_EQ(cache.mapped_segments(), 0);
}

}  // namespace
}  // namespace shardd::client
