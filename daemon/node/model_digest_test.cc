#include "daemon/node/model_digest.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/crc32c.h"
#include "daemon/node/testing/host_device_init_reader.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

std::string Fp32(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

// Unit "embed": w [4, 2] (inline values), b [4] (normal); unit "head":
// x [3] (uniform), y [] (unset: zeros).
v1::ModelSpec Spec() {
  v1::ModelSpec spec;
  v1::UnitSpec* embed = spec.add_units();
  embed->set_name("embed");
  v1::TensorSpec* w = embed->add_tensors();
  w->set_name("w");
  w->add_shape(4);
  w->add_shape(2);
  w->set_dtype(v1::DTYPE_FP32);
  w->mutable_init()->mutable_values()->set_data(Fp32({1, 2, 3, 4, 5, 6, 7, 8}));
  v1::TensorSpec* b = embed->add_tensors();
  b->set_name("b");
  b->add_shape(4);
  b->set_dtype(v1::DTYPE_FP32);
  b->mutable_init()->mutable_normal()->set_seed(9);
  b->mutable_init()->mutable_normal()->set_std(0.5f);
  v1::UnitSpec* head = spec.add_units();
  head->set_name("head");
  v1::TensorSpec* x = head->add_tensors();
  x->set_name("x");
  x->add_shape(3);
  x->set_dtype(v1::DTYPE_FP32);
  x->mutable_init()->mutable_uniform()->set_seed(4);
  x->mutable_init()->mutable_uniform()->set_low(-1.0f);
  x->mutable_init()->mutable_uniform()->set_high(1.0f);
  v1::TensorSpec* y = head->add_tensors();
  y->set_name("y");
  y->set_dtype(v1::DTYPE_FP32);
  spec.mutable_config()->mutable_optimizer()->mutable_sgd()->set_lr(0.1);
  return spec;
}

// Shared-memory values are read by the caller's function; here the "file"
// is a map from path to bytes.
ModelDigest::SharedMemoryChecksum FakeFiles(
    std::map<std::string, std::string> files) {
  return [files](const v1::SharedMemoryRef& ref,
                 const std::string& field) -> absl::StatusOr<uint32_t> {
    auto it = files.find(ref.path());
    if (it == files.end()) return absl::NotFoundError(field);
    return core::Crc32c(it->second.data() + ref.byte_offset(),
                        ref.byte_length());
  };
}

v1::ModelAgreement AgreementOf(const v1::ModelSpec& spec) {
  absl::StatusOr<v1::ModelAgreement> agreement =
      ModelDigest::Agreement(spec, FakeFiles({}));
  EXPECT_TRUE(agreement.ok()) << agreement.status();
  return *agreement;
}

class ModelDigestTest : public ::testing::Test {};

TEST_F(ModelDigestTest, EqualSpecsHaveEqualDigests) {
  const v1::ModelAgreement a = AgreementOf(Spec());
  const v1::ModelAgreement b = AgreementOf(Spec());
  EXPECT_EQ(a.tensor_digests_size(), 4);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  EXPECT_TRUE(ModelDigest::Compare(a, b, 1).ok());
}

TEST_F(ModelDigestTest, OneChangedValueIsAMismatchNamingTheTensor) {
  v1::ModelSpec other = Spec();
  other.mutable_units(0)
      ->mutable_tensors(0)
      ->mutable_init()
      ->mutable_values()
      ->set_data(Fp32({1, 2, 3, 4, 5, 6, 7, 8.5f}));
  const absl::Status s =
      ModelDigest::Compare(AgreementOf(Spec()), AgreementOf(other), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 3"));
  EXPECT_TRUE(absl::StrContains(s.message(), "units[0].tensors[0]"))
      << s.message();
  EXPECT_TRUE(absl::StrContains(s.message(), "unit 'embed', tensor 'w'"))
      << s.message();
}

TEST_F(ModelDigestTest, ValuesAreStrippedFromTheExchangedSpec) {
  v1::ModelSpec spec = Spec();
  spec.mutable_units(0)
      ->mutable_tensors(0)
      ->mutable_init()
      ->mutable_values()
      ->set_data(std::string(1 << 20, '\7'));
  spec.mutable_units(0)->mutable_tensors(0)->set_dtype(v1::DTYPE_BF16);
  const v1::ModelAgreement agreement = AgreementOf(spec);
  EXPECT_LT(agreement.ByteSizeLong(), 1024u);
  const v1::TensorInit& init = agreement.model().units(0).tensors(0).init();
  ASSERT_TRUE(init.has_values());
  EXPECT_TRUE(init.values().data().empty());
  // Everything else is as registered.
  EXPECT_EQ(agreement.model().units(0).tensors(1).DebugString(),
            spec.units(0).tensors(1).DebugString());
}

TEST_F(ModelDigestTest, InlineAndSharedMemoryValuesAgreeByContent) {
  const std::string w = Fp32({1, 2, 3, 4, 5, 6, 7, 8});
  v1::ModelSpec shm = Spec();
  v1::SharedMemoryRef* ref = shm.mutable_units(0)
                                 ->mutable_tensors(0)
                                 ->mutable_init()
                                 ->mutable_shared_memory();
  ref->set_path("/dev/shm/rank1-init");
  ref->set_segment_bytes(16 + w.size());
  ref->set_byte_offset(16);
  ref->set_byte_length(w.size());
  absl::StatusOr<v1::ModelAgreement> theirs = ModelDigest::Agreement(
      shm, FakeFiles({{"/dev/shm/rank1-init", std::string(16, 'z') + w}}));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_TRUE(ModelDigest::Compare(AgreementOf(Spec()), *theirs, 1).ok());
  // The same reference to other bytes does not agree.
  theirs = ModelDigest::Agreement(
      shm,
      FakeFiles({{"/dev/shm/rank1-init", std::string(16 + w.size(), 'z')}}));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const absl::Status s = ModelDigest::Compare(AgreementOf(Spec()), *theirs, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "tensor 'w'")) << s.message();
}

TEST_F(ModelDigestTest, SharedMemoryAndDeviceBufferValuesAgreeByContent) {
  const std::string w = Fp32({1, 2, 3, 4, 5, 6, 7, 8});
  // Rank 1 hands over w in shared memory, rank 2 in its device buffer.
  v1::ModelSpec shm = Spec();
  v1::SharedMemoryRef* ref = shm.mutable_units(0)
                                 ->mutable_tensors(0)
                                 ->mutable_init()
                                 ->mutable_shared_memory();
  ref->set_path("/dev/shm/rank1-init");
  ref->set_segment_bytes(w.size());
  ref->set_byte_length(w.size());
  absl::StatusOr<v1::ModelAgreement> rank1 =
      ModelDigest::Agreement(shm, FakeFiles({{"/dev/shm/rank1-init", w}}));
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  testing::HostDeviceInitReader device;
  const std::string handle = device.Add(std::string(32, 'q') + w);
  v1::ModelSpec gpu = Spec();
  v1::CudaIpcRef* ipc = gpu.mutable_units(0)
                            ->mutable_tensors(0)
                            ->mutable_init()
                            ->mutable_cuda_ipc();
  ipc->set_mem_handle(handle);
  ipc->set_allocation_bytes(32 + w.size());
  ipc->set_byte_offset(32);
  ipc->set_byte_length(w.size());
  absl::StatusOr<v1::ModelAgreement> rank2 =
      ModelDigest::Agreement(gpu, FakeFiles({}), device);
  ASSERT_TRUE(rank2.ok()) << rank2.status();
  EXPECT_TRUE(ModelDigest::Compare(*rank1, *rank2, 2).ok());
  EXPECT_TRUE(ModelDigest::Compare(*rank2, AgreementOf(Spec()), 0).ok());
  // The handle is not exchanged.
  EXPECT_FALSE(rank2->model().units(0).tensors(0).init().has_cuda_ipc());
  EXPECT_TRUE(
      rank2->model().units(0).tensors(0).init().values().data().empty());
  // Other bytes in the device buffer do not agree.
  const std::string other = device.Add(std::string(32 + w.size(), 'q'));
  ipc->set_mem_handle(other);
  rank2 = ModelDigest::Agreement(gpu, FakeFiles({}), device);
  ASSERT_TRUE(rank2.ok()) << rank2.status();
  const absl::Status s = ModelDigest::Compare(*rank1, *rank2, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "tensor 'w'")) << s.message();
}

TEST_F(ModelDigestTest, ADeviceChecksumErrorNamesTheInit) {
  testing::HostDeviceInitReader device;
  v1::ModelSpec gpu = Spec();
  v1::CudaIpcRef* ipc = gpu.mutable_units(1)
                            ->mutable_tensors(0)
                            ->mutable_init()
                            ->mutable_cuda_ipc();
  ipc->set_mem_handle(std::string(64, 'n'));  // No such allocation.
  ipc->set_allocation_bytes(12);
  ipc->set_byte_length(12);
  const absl::StatusOr<v1::ModelAgreement> a =
      ModelDigest::Agreement(gpu, FakeFiles({}), device);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(a.status().message(),
                                "model.units[1].tensors[0].init.cuda_ipc"))
      << a.status();
}

TEST_F(ModelDigestTest, AChecksumErrorNamesTheInit) {
  v1::ModelSpec shm = Spec();
  shm.mutable_units(1)
      ->mutable_tensors(1)
      ->mutable_init()
      ->mutable_shared_memory()
      ->set_path("/dev/shm/gone");
  const absl::StatusOr<v1::ModelAgreement> a =
      ModelDigest::Agreement(shm, FakeFiles({}));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(a.status().message(),
                                "model.units[1].tensors[1].init.shared_memory"))
      << a.status();
}

TEST_F(ModelDigestTest, OtherInitKindsCountByTheirParameters) {
  v1::ModelSpec other = Spec();
  other.mutable_units(1)
      ->mutable_tensors(0)
      ->mutable_init()
      ->mutable_uniform()
      ->set_seed(5);
  absl::Status s =
      ModelDigest::Compare(AgreementOf(Spec()), AgreementOf(other), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "uniform.seed")) << s.message();
  // Digests alone tell kinds and parameters apart; unset equals zeros.
  v1::TensorSpec t = Spec().units(1).tensors(0);
  const uint64_t uniform = ModelDigest::TensorDigest(t, 0, 0);
  t.mutable_init()->mutable_uniform()->set_high(2.0f);
  EXPECT_NE(ModelDigest::TensorDigest(t, 0, 0), uniform);
  t.mutable_init()->Clear();
  const uint64_t unset = ModelDigest::TensorDigest(t, 0, 0);
  t.mutable_init()->mutable_zeros();
  EXPECT_EQ(ModelDigest::TensorDigest(t, 0, 0), unset);
  t.add_shape(1);
  EXPECT_NE(ModelDigest::TensorDigest(t, 0, 0), unset);
}

TEST_F(ModelDigestTest, ThousandsOfTensorsStayWellUnderTheStoreLimit) {
  // 8,000 tensors with Hugging Face style names and 4 KiB of values each
  // (32 MB of values): the agreement stays far below the 1 MiB cap.
  v1::ModelSpec spec = Spec();
  const std::string values(4096, '\1');
  for (int layer = 0; layer < 1000; ++layer) {
    v1::UnitSpec* unit = spec.add_units();
    unit->set_name(absl::StrCat("model.layers.", layer));
    for (const char* name :
         {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
          "input_layernorm.weight"}) {
      v1::TensorSpec* t = unit->add_tensors();
      t->set_name(name);
      t->add_shape(32);
      t->add_shape(32);
      t->set_dtype(v1::DTYPE_FP32);
      t->mutable_init()->mutable_values()->set_data(values);
    }
  }
  const v1::ModelAgreement agreement = AgreementOf(spec);
  EXPECT_EQ(agreement.tensor_digests_size(), 8004);
  EXPECT_LT(agreement.ByteSizeLong(), 512u * 1024) << agreement.ByteSizeLong();
  EXPECT_TRUE(ModelDigest::Compare(agreement, AgreementOf(spec), 1).ok());
}

v1::StateSourceDigest Source(const std::string& field, const std::string& path,
                             int64_t step, uint64_t digest) {
  v1::StateSourceDigest d;
  d.set_field(field);
  d.set_path(path);
  d.set_step(step);
  d.set_digest(digest);
  return d;
}

TEST_F(ModelDigestTest, SameSavedStateAtOtherPathsAgrees) {
  v1::ModelAgreement a = AgreementOf(Spec());
  v1::ModelAgreement b = AgreementOf(Spec());
  *a.mutable_state_source() = Source("load_from", "/nvme0/m.safetensors", 6, 7);
  *b.mutable_state_source() = Source("load_from", "/nvme1/m.safetensors", 6, 7);
  EXPECT_TRUE(ModelDigest::Compare(a, b, 1).ok());
}

TEST_F(ModelDigestTest, OtherSavedStateIsAMismatchNamingTheField) {
  const v1::ModelAgreement base = AgreementOf(Spec());
  struct Case {
    v1::StateSourceDigest mine, theirs;
    std::string field;
  };
  const std::vector<Case> cases = {
      {Source("load_from", "/a", 6, 7), Source("load_from", "/b", 6, 8),
       "load_from"},
      {Source("load_from", "/a", 6, 7), Source("load_from", "/a", 9, 7),
       "load_from"},
      {Source("resume_from", "/c", 6, 7), Source("load_from", "/c", 6, 7),
       "resume_from"},
      {Source("load_from", "/a", 6, 7), v1::StateSourceDigest(), "load_from"},
      {v1::StateSourceDigest(), Source("resume_from", "/c", 3, 1),
       "resume_from"},
  };
  for (const Case& c : cases) {
    v1::ModelAgreement a = base, b = base;
    *a.mutable_state_source() = c.mine;
    *b.mutable_state_source() = c.theirs;
    const absl::Status s = ModelDigest::Compare(a, b, 2);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition)
        << c.mine.ShortDebugString() << " vs " << c.theirs.ShortDebugString();
    EXPECT_TRUE(
        absl::StartsWith(s.message(), c.field + ": differs from rank 2"))
        << s.message();
  }
}

}  // namespace
}  // namespace shardd::node
