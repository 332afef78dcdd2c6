#ifndef SHARDD_DAEMON_NODE_MODEL_DIGEST_H_
#define SHARDD_DAEMON_NODE_MODEL_DIGEST_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/node/device_init_reader.h"
#include "shardd/v1/common.pb.h"
#include "shardd/v1/peer.pb.h"

namespace shardd::node {

// How the ranks of a job agree on a registered model without exchanging its
// initial values (issue #18): each rank publishes a v1::ModelAgreement (the
// model with value payloads stripped, plus one digest per tensor) in the
// rendezvous store, whose values are capped at 1 MiB, and compares it with
// every other rank's.
//
// A tensor's digest covers its shape, dtype and init. A value init
// (InlineValues, SharedMemoryRef, a CudaIpcRef of the trainer's device
// buffer) counts by content: its byte length and the CRC-32C of its bytes,
// so the same values uploaded inline on one rank, in shared memory on
// another and in a device buffer on a third agree. Any other kind (zeros,
// constant, normal, uniform, and kinds added later) counts by the deterministic
// serialization of its TensorInit message, so a kind this class has never
// heard of still agrees by content. An unset init counts as zeros.
//
// Pure functions of their arguments (the checksum of shared-memory values
// is computed by the caller's function, that of device values by a
// DeviceInitReader, which do the I/O); thread-safe.
class ModelDigest {
 public:
  // CRC-32C of a SharedMemoryRef init's bytes; `field` names the init for
  // messages. Supplied by the caller (SharedMemoryInitReader::Checksum).
  using SharedMemoryChecksum = std::function<absl::StatusOr<uint32_t>(
      const v1::SharedMemoryRef& ref, const std::string& field)>;

  // The agreement this rank publishes for `model` (already converted and
  // validated). Errors are the checksum's (the field named). Device values
  // are read by DeviceInitSupport::OfThisBuild().
  static absl::StatusOr<v1::ModelAgreement> Agreement(
      const v1::ModelSpec& model, const SharedMemoryChecksum& checksum);
  // The same, device values read by `device`.
  static absl::StatusOr<v1::ModelAgreement> Agreement(
      const v1::ModelSpec& model, const SharedMemoryChecksum& checksum,
      DeviceInitReader& device);

  // `model` with value payloads stripped (ModelAgreement.model).
  static v1::ModelSpec Stripped(const v1::ModelSpec& model);

  // OK when rank `their_rank`'s agreement equals mine; else
  // FAILED_PRECONDITION naming the first difference (mine first): a field
  // of the stripped model as core::CompareModels names it, or the unit and
  // tensor whose initial values differ. INVALID_ARGUMENT if either stripped
  // model does not convert.
  static absl::Status Compare(const v1::ModelAgreement& mine,
                              const v1::ModelAgreement& theirs, int their_rank);

  // The digest of one tensor whose value init (if any) has `values_bytes`
  // bytes with CRC-32C `values_crc` (ignored for other kinds).
  static uint64_t TensorDigest(const v1::TensorSpec& tensor,
                               int64_t values_bytes, uint32_t values_crc);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_MODEL_DIGEST_H_
