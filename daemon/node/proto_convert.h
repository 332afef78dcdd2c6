#ifndef SHARDD_DAEMON_NODE_PROTO_CONVERT_H_
#define SHARDD_DAEMON_NODE_PROTO_CONVERT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/comm/collective.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/model_config.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {

// Conversion between the wire API (shardd.v1) and core's plain structs.
//
// Proto -> core resolves the defaults common.proto documents for unset
// values: strategy UNSPECIFIED is FULL_SHARD, an unset unit alignment is
// config.default_alignment, alignment mode UNSPECIFIED is ELEMENT,
// max_gathered_units 0 is 2, an unset TensorInit is zeros; param_dtype and
// reduce_dtype UNSPECIFIED stay "unspecified" (their defaults depend on the
// units), as does sharding_factor 0 (it depends on W). It rejects, with
// INVALID_ARGUMENT naming the field path below `path` (e.g.
// "model.units[1].tensors[0].dtype: required, got DTYPE_UNSPECIFIED"),
// what the conversion itself cannot represent: a required enum left
// UNSPECIFIED (tensor dtype), enum values this build does not know, an unset
// or unknown oneof (optimizer), negative numbers (sharding_factor,
// max_gathered_units, max_grad_norm, block_elements, shared-memory
// offsets), a block size that does not fit the mode, a CUDA IPC init whose
// handle is not 64 bytes, whose range is outside its allocation or not a
// whole number of the tensor's elements, or that names a ready event.
// Everything else (shapes, names, sizes, hyper-parameter ranges) is
// core::Validate's job; its paths are relative to ModelSpec, so callers prefix
// "model.".
//
// Stateless functions; thread-safe.
class ProtoConvert {
 public:
  static absl::StatusOr<core::ModelConfig> ModelFromProto(
      const v1::ModelSpec& spec, absl::string_view path = "model");

  // The inverse (every unit gets its alignment explicitly; unspecified
  // dtypes stay UNSPECIFIED). ModelFromProto(ModelToProto(m)) == m.
  static v1::ModelSpec ModelToProto(const core::ModelConfig& model);

  // The fields of a TensorInit.cuda_ipc, unchecked (ModelFromProto checks
  // them).
  static core::CudaIpcSource CudaIpcSourceFromProto(const v1::CudaIpcRef& ref);

  static v1::MemoryBreakdown MemoryToProto(const core::MemoryBreakdown& memory);

  // GetStatus's view of one process group of `group_size` ranks: one entry
  // per all-gather, reduce-scatter and all-reduce (in that order), with
  // the bytes on the wire as the ring algorithms move them.
  static std::vector<v1::CollectiveStats> CollectiveStatsToProto(
      v1::ProcessGroup group, int64_t group_size,
      const comm::CollectiveStats& stats);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_PROTO_CONVERT_H_
