#include "daemon/node/model_digest.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/model_config.h"
#include "daemon/node/device_init_support.h"
#include "daemon/node/proto_convert.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace shardd::node {
namespace {

// FNV-1a over the canonical bytes of a tensor, then splitmix64's finaliser
// (so that similar inputs spread over all 64 bits). Fixed here: the digest
// is the same on every machine and build.
class Hasher {
 public:
  void Bytes(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ = (h_ ^ p[i]) * 0x100000001B3ull;
    }
  }
  void Word(uint64_t value) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i)
      le[i] = static_cast<unsigned char>(value >> (8 * i));
    Bytes(le, sizeof(le));
  }
  uint64_t Finish() const {
    uint64_t z = h_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t h_ = 0xCBF29CE484222325ull;
};

std::string DeterministicBytes(const v1::TensorInit& init) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    init.SerializeToCodedStream(&coded);
  }
  return out;
}

bool IsValueInit(const v1::TensorInit& init) {
  return init.kind_case() == v1::TensorInit::kValues ||
         init.kind_case() == v1::TensorInit::kSharedMemory ||
         init.kind_case() == v1::TensorInit::kCudaIpc;
}

}  // namespace

uint64_t ModelDigest::TensorDigest(const v1::TensorSpec& tensor,
                                   int64_t values_bytes, uint32_t values_crc) {
  Hasher h;
  h.Word(static_cast<uint64_t>(tensor.shape_size()));
  for (int64_t d : tensor.shape()) h.Word(static_cast<uint64_t>(d));
  h.Word(static_cast<uint64_t>(tensor.dtype()));
  const v1::TensorInit& init = tensor.init();
  if (IsValueInit(init)) {
    h.Word('V');
    h.Word(static_cast<uint64_t>(values_bytes));
    h.Word(values_crc);
  } else {
    v1::TensorInit canonical = init;
    if (canonical.kind_case() == v1::TensorInit::KIND_NOT_SET) {
      canonical.mutable_zeros();  // Unset means zeros.
    }
    const std::string bytes = DeterministicBytes(canonical);
    h.Word('K');
    h.Word(static_cast<uint64_t>(canonical.kind_case()));
    h.Word(bytes.size());
    h.Bytes(bytes.data(), bytes.size());
  }
  return h.Finish();
}

v1::ModelSpec ModelDigest::Stripped(const v1::ModelSpec& model) {
  v1::ModelSpec stripped = model;
  for (v1::UnitSpec& unit : *stripped.mutable_units()) {
    for (v1::TensorSpec& tensor : *unit.mutable_tensors()) {
      if (IsValueInit(tensor.init())) {
        tensor.mutable_init()->mutable_values()->clear_data();
      }
    }
  }
  return stripped;
}

absl::StatusOr<v1::ModelAgreement> ModelDigest::Agreement(
    const v1::ModelSpec& model, const SharedMemoryChecksum& checksum) {
  return Agreement(model, checksum, DeviceInitSupport::OfThisBuild());
}

absl::StatusOr<v1::ModelAgreement> ModelDigest::Agreement(
    const v1::ModelSpec& model, const SharedMemoryChecksum& checksum,
    DeviceInitReader& device) {
  v1::ModelAgreement agreement;
  for (int u = 0; u < model.units_size(); ++u) {
    const v1::UnitSpec& unit = model.units(u);
    for (int t = 0; t < unit.tensors_size(); ++t) {
      const v1::TensorSpec& tensor = unit.tensors(t);
      const v1::TensorInit& init = tensor.init();
      int64_t bytes = 0;
      uint32_t crc = 0;
      if (init.kind_case() == v1::TensorInit::kValues) {
        bytes = static_cast<int64_t>(init.values().data().size());
        crc = core::Crc32c(init.values().data().data(), bytes);
      } else if (init.kind_case() == v1::TensorInit::kSharedMemory) {
        absl::StatusOr<uint32_t> sum = checksum(
            init.shared_memory(), absl::StrCat("model.units[", u, "].tensors[",
                                               t, "].init.shared_memory"));
        if (!sum.ok()) return sum.status();
        bytes = init.shared_memory().byte_length();
        crc = *sum;
      } else if (init.kind_case() == v1::TensorInit::kCudaIpc) {
        absl::StatusOr<uint32_t> sum = device.Checksum(
            ProtoConvert::CudaIpcSourceFromProto(init.cuda_ipc()),
            absl::StrCat("model.units[", u, "].tensors[", t,
                         "].init.cuda_ipc"));
        if (!sum.ok()) return sum.status();
        bytes = init.cuda_ipc().byte_length();
        crc = *sum;
      }
      agreement.add_tensor_digests(TensorDigest(tensor, bytes, crc));
    }
  }
  *agreement.mutable_model() = Stripped(model);
  return agreement;
}

absl::Status ModelDigest::Compare(const v1::ModelAgreement& mine,
                                  const v1::ModelAgreement& theirs,
                                  int their_rank) {
  absl::StatusOr<core::ModelConfig> a =
      ProtoConvert::ModelFromProto(mine.model());
  if (!a.ok()) return a.status();
  absl::StatusOr<core::ModelConfig> b =
      ProtoConvert::ModelFromProto(theirs.model());
  if (!b.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", their_rank,
                     "'s model does not convert: ", b.status().message()));
  }
  if (absl::Status same = core::CompareModels(*a, *b); !same.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model differs from rank ", their_rank,
                     "'s (mine vs theirs): model.", same.message()));
  }
  int index = 0;
  for (int u = 0; u < mine.model().units_size(); ++u) {
    const v1::UnitSpec& unit = mine.model().units(u);
    for (int t = 0; t < unit.tensors_size(); ++t, ++index) {
      const bool have_mine = index < mine.tensor_digests_size();
      const bool have_theirs = index < theirs.tensor_digests_size();
      if (have_mine && have_theirs &&
          mine.tensor_digests(index) == theirs.tensor_digests(index)) {
        continue;
      }
      return absl::FailedPreconditionError(absl::StrFormat(
          "model differs from rank %d's: model.units[%d].tensors[%d].init "
          "(unit '%s', tensor '%s'): the initial values differ (content "
          "digest %016x here, %016x there)",
          their_rank, u, t, unit.name(), unit.tensors(t).name(),
          have_mine ? mine.tensor_digests(index) : 0,
          have_theirs ? theirs.tensor_digests(index) : 0));
    }
  }
  const v1::StateSourceDigest& a_src = mine.state_source();
  const v1::StateSourceDigest& b_src = theirs.state_source();
  if (a_src.field() != b_src.field() || a_src.step() != b_src.step() ||
      a_src.digest() != b_src.digest()) {
    auto describe = [](const v1::StateSourceDigest& d) {
      return d.field().empty()
                 ? std::string("no saved state")
                 : absl::StrFormat("%s '%s' (step %d, digest %016x)", d.field(),
                                   d.path(), d.step(), d.digest());
    };
    const std::string& field =
        a_src.field().empty() ? b_src.field() : a_src.field();
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": differs from rank ", their_rank,
                     "'s: ", describe(a_src), " here, ", describe(b_src),
                     " there; every rank must load the same "
                     "saved state"));
  }
  if (theirs.tensor_digests_size() != index) {
    return absl::FailedPreconditionError(
        absl::StrCat("model differs from rank ", their_rank,
                     "'s: ", theirs.tensor_digests_size(),
                     " tensor digests for ", index, " tensors"));
  }
  return absl::OkStatus();
}

}  // namespace shardd::node
