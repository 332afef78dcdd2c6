#include "daemon/node/proto_convert.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace shardd::node {
namespace {

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// DTYPE_UNSPECIFIED -> nullopt; unknown values are INVALID_ARGUMENT.
absl::StatusOr<std::optional<core::DType>> DTypeFromProto(
    int value, absl::string_view path) {
  switch (value) {
    case v1::DTYPE_UNSPECIFIED:
      return std::nullopt;
    case v1::DTYPE_FP32:
      return core::DType::kFloat32;
    case v1::DTYPE_BF16:
      return core::DType::kBFloat16;
    case v1::DTYPE_FP16:
      return core::DType::kFloat16;
  }
  return Invalid(path, absl::StrCat("unknown value ", value));
}

v1::DType DTypeToProto(std::optional<core::DType> dtype) {
  if (!dtype.has_value()) return v1::DTYPE_UNSPECIFIED;
  switch (*dtype) {
    case core::DType::kFloat32:
      return v1::DTYPE_FP32;
    case core::DType::kBFloat16:
      return v1::DTYPE_BF16;
    case core::DType::kFloat16:
      return v1::DTYPE_FP16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<core::AlignmentSpec> AlignmentFromProto(
    const v1::Alignment& alignment, const std::string& path) {
  core::AlignmentSpec spec;
  switch (alignment.mode()) {
    case v1::ALIGNMENT_MODE_UNSPECIFIED:
    case v1::ALIGNMENT_MODE_ELEMENT:
      spec.mode = core::AlignmentMode::kElement;
      break;
    case v1::ALIGNMENT_MODE_BLOCK:
      spec.mode = core::AlignmentMode::kBlock;
      break;
    case v1::ALIGNMENT_MODE_WHOLE_TENSOR:
      spec.mode = core::AlignmentMode::kWholeTensor;
      break;
    default:
      return Invalid(path + ".mode",
                     absl::StrCat("unknown value ", alignment.mode()));
  }
  const int64_t block = alignment.block_elements();
  if (spec.mode == core::AlignmentMode::kBlock && block < 1) {
    return Invalid(path + ".block_elements",
                   absl::StrCat("must be >= 1 for BLOCK, got ", block));
  }
  if (spec.mode != core::AlignmentMode::kBlock && block != 0) {
    return Invalid(
        path + ".block_elements",
        absl::StrCat("must be 0 unless the mode is BLOCK, got ", block));
  }
  spec.block_elements = block;
  return spec;
}

// A normal init: its std must be >= 0 (NaN is not).
absl::StatusOr<core::InitSpec> NormalInitFromProto(const v1::TensorInit& init,
                                                   const std::string& path) {
  const v1::NormalInit& normal = init.normal();
  if (!(normal.std() >= 0.0f)) {
    return Invalid(path + ".normal.std",
                   absl::StrCat("must be >= 0, got ", normal.std()));
  }
  return core::InitSpec::Normal(normal.seed(), normal.mean(), normal.std());
}

// A uniform init: finite bounds, low below high.
absl::StatusOr<core::InitSpec> UniformInitFromProto(const v1::TensorInit& init,
                                                    const std::string& path) {
  const v1::UniformInit& uniform = init.uniform();
  if (!std::isfinite(uniform.low())) {
    return Invalid(path + ".uniform.low",
                   absl::StrCat("must be finite, got ", uniform.low()));
  }
  if (!std::isfinite(uniform.high()) || !(uniform.low() < uniform.high())) {
    return Invalid(path + ".uniform.high",
                   absl::StrCat("must be finite and > uniform.low (",
                                uniform.low(), "), got ", uniform.high()));
  }
  return core::InitSpec::Uniform(uniform.seed(), uniform.low(), uniform.high());
}

// A shared-memory init: only the signs of its sizes are checked here; the
// range is checked against the segment when it is read.
absl::StatusOr<core::InitSpec> SharedMemoryInitFromProto(
    const v1::TensorInit& init, const std::string& path) {
  const v1::SharedMemoryRef& ref = init.shared_memory();
  if (ref.segment_bytes() < 0 || ref.byte_offset() < 0 ||
      ref.byte_length() < 0) {
    return Invalid(path + ".shared_memory",
                   "segment_bytes, byte_offset and byte_length must be "
                   ">= 0");
  }
  core::InitSpec spec;
  spec.kind = core::InitKind::kSharedMemory;
  spec.shared_memory = {ref.path(), ref.segment_bytes(), ref.byte_offset(),
                        ref.byte_length()};
  return spec;
}

// A CUDA IPC init: a 64-byte handle, no ready event, and a range inside
// the allocation that is a whole number of `dtype` elements.
absl::StatusOr<core::InitSpec> CudaIpcInitFromProto(const v1::TensorInit& init,
                                                    core::DType dtype,
                                                    const std::string& path) {
  const v1::CudaIpcRef& ref = init.cuda_ipc();
  const std::string field = path + ".cuda_ipc";
  if (static_cast<int64_t>(ref.mem_handle().size()) !=
      core::CudaIpcSource::kCudaIpcHandleBytes) {
    return Invalid(field + ".mem_handle",
                   absl::StrCat("must be the 64 bytes of a "
                                "cudaIpcMemHandle_t, got ",
                                ref.mem_handle().size()));
  }
  if (!ref.ready_event_handle().empty()) {
    return Invalid(field + ".ready_event_handle",
                   "must be empty for an init: finish the writes before "
                   "RegisterModel");
  }
  if (ref.device_ordinal() < 0) {
    return Invalid(field + ".device_ordinal",
                   absl::StrCat("must be >= 0, got ", ref.device_ordinal()));
  }
  if (ref.allocation_bytes() < 0) {
    return Invalid(field + ".allocation_bytes",
                   absl::StrCat("must be >= 0, got ", ref.allocation_bytes()));
  }
  if (ref.byte_length() < 0 || ref.byte_length() > ref.allocation_bytes()) {
    return Invalid(
        field + ".byte_length",
        absl::StrCat("must be in [0, allocation_bytes = ",
                     ref.allocation_bytes(), "], got ", ref.byte_length()));
  }
  if (ref.byte_offset() < 0 ||
      ref.byte_offset() > ref.allocation_bytes() - ref.byte_length()) {
    return Invalid(
        field + ".byte_offset",
        absl::StrCat("range [", ref.byte_offset(), ", +", ref.byte_length(),
                     ") outside the allocation of ", ref.allocation_bytes(),
                     " bytes"));
  }
  const int64_t size = core::DTypeSize(dtype);
  if (ref.byte_length() % size != 0) {
    return Invalid(
        field + ".byte_length",
        absl::StrCat(ref.byte_length(), " bytes is not a whole number of ",
                     core::DTypeName(dtype), " elements"));
  }
  if (ref.byte_offset() % size != 0) {
    return Invalid(
        field + ".byte_offset",
        absl::StrCat("must be a multiple of ", size, " (",
                     core::DTypeName(dtype), "), got ", ref.byte_offset()));
  }
  core::InitSpec spec;
  spec.kind = core::InitKind::kCudaIpc;
  spec.cuda_ipc = ProtoConvert::CudaIpcSourceFromProto(ref);
  return spec;
}

absl::StatusOr<core::InitSpec> InitFromProto(const v1::TensorInit& init,
                                             core::DType dtype,
                                             const std::string& path) {
  switch (init.kind_case()) {
    case v1::TensorInit::KIND_NOT_SET:
    case v1::TensorInit::kZeros:
    // A file's values are read by state::StateImport once the engine
    // exists (each rank its own shard); until then the tensor is zeros.
    case v1::TensorInit::kFile:
      return core::InitSpec::Zeros();
    case v1::TensorInit::kConstant:
      return core::InitSpec::Constant(init.constant().value());
    case v1::TensorInit::kNormal:
      return NormalInitFromProto(init, path);
    case v1::TensorInit::kUniform:
      return UniformInitFromProto(init, path);
    case v1::TensorInit::kValues:
      return core::InitSpec::Values(init.values().data(), dtype);
    case v1::TensorInit::kSharedMemory:
      return SharedMemoryInitFromProto(init, path);
    case v1::TensorInit::kCudaIpc:
      return CudaIpcInitFromProto(init, dtype, path);
  }
  return Invalid(
      path, absl::StrCat("unknown kind ", static_cast<int>(init.kind_case())));
}

void InitToProto(const core::InitSpec& init, v1::TensorInit* out) {
  switch (init.kind) {
    case core::InitKind::kZeros:
      out->mutable_zeros();
      break;
    case core::InitKind::kConstant:
      out->mutable_constant()->set_value(init.constant);
      break;
    case core::InitKind::kNormal:
      out->mutable_normal()->set_seed(init.seed);
      out->mutable_normal()->set_mean(init.mean);
      out->mutable_normal()->set_std(init.std);
      break;
    case core::InitKind::kUniform:
      out->mutable_uniform()->set_seed(init.seed);
      out->mutable_uniform()->set_low(init.low);
      out->mutable_uniform()->set_high(init.high);
      break;
    case core::InitKind::kValues:
      out->mutable_values()->set_data(init.values == nullptr ? std::string()
                                                             : *init.values);
      break;
    case core::InitKind::kSharedMemory: {
      v1::SharedMemoryRef* ref = out->mutable_shared_memory();
      ref->set_path(init.shared_memory.path);
      ref->set_segment_bytes(init.shared_memory.segment_bytes);
      ref->set_byte_offset(init.shared_memory.byte_offset);
      ref->set_byte_length(init.shared_memory.byte_length);
      break;
    }
    case core::InitKind::kCudaIpc: {
      v1::CudaIpcRef* ref = out->mutable_cuda_ipc();
      ref->set_mem_handle(init.cuda_ipc.mem_handle);
      ref->set_device_ordinal(init.cuda_ipc.device_ordinal);
      ref->set_pci_bus_id(init.cuda_ipc.pci_bus_id);
      ref->set_allocation_bytes(init.cuda_ipc.allocation_bytes);
      ref->set_byte_offset(init.cuda_ipc.byte_offset);
      ref->set_byte_length(init.cuda_ipc.byte_length);
      break;
    }
  }
}

absl::StatusOr<core::ShardingConfig> ConfigFromProto(
    const v1::ShardingConfig& proto, const std::string& path) {
  core::ShardingConfig config;
  switch (proto.strategy()) {
    case v1::SHARDING_STRATEGY_UNSPECIFIED:
    case v1::SHARDING_STRATEGY_FULL_SHARD:
      config.strategy = core::ShardingStrategy::kFullShard;
      break;
    case v1::SHARDING_STRATEGY_SHARD_GRAD_OP:
      config.strategy = core::ShardingStrategy::kShardGradOp;
      break;
    case v1::SHARDING_STRATEGY_NO_SHARD:
      config.strategy = core::ShardingStrategy::kNoShard;
      break;
    case v1::SHARDING_STRATEGY_HYBRID_SHARD:
      config.strategy = core::ShardingStrategy::kHybridShard;
      break;
    default:
      return Invalid(path + ".strategy",
                     absl::StrCat("unknown value ", proto.strategy()));
  }
  if (proto.sharding_factor() < 0) {
    return Invalid(path + ".sharding_factor",
                   absl::StrCat("must be >= 0 (0: the strategy's default), "
                                "got ",
                                proto.sharding_factor()));
  }
  config.sharding_factor = proto.sharding_factor();
  absl::StatusOr<std::optional<core::DType>> param =
      DTypeFromProto(proto.param_dtype(), path + ".param_dtype");
  if (!param.ok()) return param.status();
  config.param_dtype = *param;
  absl::StatusOr<std::optional<core::DType>> reduce =
      DTypeFromProto(proto.reduce_dtype(), path + ".reduce_dtype");
  if (!reduce.ok()) return reduce.status();
  config.reduce_dtype = *reduce;
  switch (proto.optimizer().kind_case()) {
    case v1::OptimizerConfig::kAdamw: {
      const v1::AdamW& a = proto.optimizer().adamw();
      config.optimizer = core::AdamWOptions{.lr = a.lr(),
                                            .beta1 = a.beta1(),
                                            .beta2 = a.beta2(),
                                            .eps = a.eps(),
                                            .weight_decay = a.weight_decay()};
      break;
    }
    case v1::OptimizerConfig::kSgd: {
      const v1::Sgd& s = proto.optimizer().sgd();
      config.optimizer = core::SgdOptions{.lr = s.lr(),
                                          .momentum = s.momentum(),
                                          .dampening = s.dampening(),
                                          .weight_decay = s.weight_decay(),
                                          .nesterov = s.nesterov()};
      break;
    }
    default:
      return Invalid(path + ".optimizer", "required: set adamw or sgd");
  }
  if (!(proto.max_grad_norm() >= 0.0) ||
      !std::isfinite(proto.max_grad_norm())) {
    return Invalid(path + ".max_grad_norm",
                   absl::StrCat("must be finite and >= 0 (0: no clipping), "
                                "got ",
                                proto.max_grad_norm()));
  }
  config.max_grad_norm = proto.max_grad_norm();
  if (proto.max_gathered_units() < 0) {
    return Invalid(
        path + ".max_gathered_units",
        absl::StrCat("must be >= 0 (0: 2), got ", proto.max_gathered_units()));
  }
  config.max_gathered_units =
      proto.max_gathered_units() == 0 ? 2 : proto.max_gathered_units();
  if (proto.max_reducing_units() < 0) {
    return Invalid(
        path + ".max_reducing_units",
        absl::StrCat("must be >= 0 (0: 2), got ", proto.max_reducing_units()));
  }
  config.max_reducing_units =
      proto.max_reducing_units() == 0 ? 2 : proto.max_reducing_units();
  return config;
}

}  // namespace

absl::StatusOr<core::ModelConfig> ProtoConvert::ModelFromProto(
    const v1::ModelSpec& spec, absl::string_view path) {
  core::ModelConfig model;
  const std::string config_path = absl::StrCat(path, ".config");
  absl::StatusOr<core::ShardingConfig> config =
      ConfigFromProto(spec.config(), config_path);
  if (!config.ok()) return config.status();
  model.config = *std::move(config);
  absl::StatusOr<core::AlignmentSpec> default_alignment = AlignmentFromProto(
      spec.config().default_alignment(), config_path + ".default_alignment");
  if (!default_alignment.ok()) return default_alignment.status();

  model.units.reserve(spec.units_size());
  for (int u = 0; u < spec.units_size(); ++u) {
    const v1::UnitSpec& unit_proto = spec.units(u);
    const std::string up = absl::StrCat(path, ".units[", u, "]");
    core::UnitConfig unit;
    unit.name = unit_proto.name();
    if (unit_proto.has_alignment()) {
      absl::StatusOr<core::AlignmentSpec> alignment =
          AlignmentFromProto(unit_proto.alignment(), up + ".alignment");
      if (!alignment.ok()) return alignment.status();
      unit.alignment = *alignment;
    } else {
      unit.alignment = *default_alignment;
    }
    unit.tensors.reserve(unit_proto.tensors_size());
    for (int t = 0; t < unit_proto.tensors_size(); ++t) {
      const v1::TensorSpec& tensor_proto = unit_proto.tensors(t);
      const std::string tp = absl::StrCat(up, ".tensors[", t, "]");
      core::TensorConfig tensor;
      tensor.spec.name = tensor_proto.name();
      tensor.spec.shape.assign(tensor_proto.shape().begin(),
                               tensor_proto.shape().end());
      absl::StatusOr<std::optional<core::DType>> dtype =
          DTypeFromProto(tensor_proto.dtype(), tp + ".dtype");
      if (!dtype.ok()) return dtype.status();
      if (!dtype->has_value()) {
        return Invalid(tp + ".dtype", "required, got DTYPE_UNSPECIFIED");
      }
      tensor.spec.dtype = **dtype;
      absl::StatusOr<core::InitSpec> init =
          InitFromProto(tensor_proto.init(), tensor.spec.dtype, tp + ".init");
      if (!init.ok()) return init.status();
      tensor.init = *std::move(init);
      tensor.exclude_from_weight_decay =
          tensor_proto.exclude_from_weight_decay();
      unit.tensors.push_back(std::move(tensor));
    }
    model.units.push_back(std::move(unit));
  }
  return model;
}

v1::ModelSpec ProtoConvert::ModelToProto(const core::ModelConfig& model) {
  v1::ModelSpec spec;
  for (const core::UnitConfig& unit : model.units) {
    v1::UnitSpec* unit_proto = spec.add_units();
    unit_proto->set_name(unit.name);
    v1::Alignment* alignment = unit_proto->mutable_alignment();
    switch (unit.alignment.mode) {
      case core::AlignmentMode::kElement:
        alignment->set_mode(v1::ALIGNMENT_MODE_ELEMENT);
        break;
      case core::AlignmentMode::kBlock:
        alignment->set_mode(v1::ALIGNMENT_MODE_BLOCK);
        alignment->set_block_elements(unit.alignment.block_elements);
        break;
      case core::AlignmentMode::kWholeTensor:
        alignment->set_mode(v1::ALIGNMENT_MODE_WHOLE_TENSOR);
        break;
    }
    for (const core::TensorConfig& tensor : unit.tensors) {
      v1::TensorSpec* tensor_proto = unit_proto->add_tensors();
      tensor_proto->set_name(tensor.spec.name);
      for (int64_t dim : tensor.spec.shape) tensor_proto->add_shape(dim);
      tensor_proto->set_dtype(DTypeToProto(tensor.spec.dtype));
      InitToProto(tensor.init, tensor_proto->mutable_init());
      tensor_proto->set_exclude_from_weight_decay(
          tensor.exclude_from_weight_decay);
    }
  }
  const core::ShardingConfig& config = model.config;
  v1::ShardingConfig* out = spec.mutable_config();
  switch (config.strategy) {
    case core::ShardingStrategy::kFullShard:
      out->set_strategy(v1::SHARDING_STRATEGY_FULL_SHARD);
      break;
    case core::ShardingStrategy::kShardGradOp:
      out->set_strategy(v1::SHARDING_STRATEGY_SHARD_GRAD_OP);
      break;
    case core::ShardingStrategy::kNoShard:
      out->set_strategy(v1::SHARDING_STRATEGY_NO_SHARD);
      break;
    case core::ShardingStrategy::kHybridShard:
      out->set_strategy(v1::SHARDING_STRATEGY_HYBRID_SHARD);
      break;
  }
  out->set_sharding_factor(static_cast<int32_t>(config.sharding_factor));
  out->set_param_dtype(DTypeToProto(config.param_dtype));
  out->set_reduce_dtype(DTypeToProto(config.reduce_dtype));
  if (const auto* a = std::get_if<core::AdamWOptions>(&config.optimizer)) {
    v1::AdamW* adamw = out->mutable_optimizer()->mutable_adamw();
    adamw->set_lr(a->lr);
    adamw->set_beta1(a->beta1);
    adamw->set_beta2(a->beta2);
    adamw->set_eps(a->eps);
    adamw->set_weight_decay(a->weight_decay);
  } else {
    const auto& s = std::get<core::SgdOptions>(config.optimizer);
    v1::Sgd* sgd = out->mutable_optimizer()->mutable_sgd();
    sgd->set_lr(s.lr);
    sgd->set_momentum(s.momentum);
    sgd->set_dampening(s.dampening);
    sgd->set_nesterov(s.nesterov);
    sgd->set_weight_decay(s.weight_decay);
  }
  out->set_max_grad_norm(config.max_grad_norm);
  out->set_max_gathered_units(static_cast<int32_t>(config.max_gathered_units));
  out->set_max_reducing_units(static_cast<int32_t>(config.max_reducing_units));
  return spec;
}

core::CudaIpcSource ProtoConvert::CudaIpcSourceFromProto(
    const v1::CudaIpcRef& ref) {
  core::CudaIpcSource source;
  source.mem_handle = ref.mem_handle();
  source.device_ordinal = ref.device_ordinal();
  source.pci_bus_id = ref.pci_bus_id();
  source.allocation_bytes = ref.allocation_bytes();
  source.byte_offset = ref.byte_offset();
  source.byte_length = ref.byte_length();
  return source;
}

v1::MemoryBreakdown ProtoConvert::MemoryToProto(
    const core::MemoryBreakdown& memory) {
  v1::MemoryBreakdown out;
  out.set_parameter_shard_bytes(memory.parameter_shard_bytes);
  out.set_low_precision_parameter_bytes(memory.lowp_parameter_shard_bytes);
  out.set_gradient_shard_bytes(memory.gradient_shard_bytes);
  out.set_optimizer_state_bytes(memory.optimizer_state_bytes);
  out.set_gathered_parameter_bytes(memory.gathered_parameter_bytes);
  out.set_unsharded_gradient_bytes(memory.unsharded_gradient_bytes);
  out.set_padding_bytes(memory.shard_padding_bytes);
  out.set_peak_parameter_bytes(memory.peak_parameter_bytes);
  out.set_total_bytes(memory.total_bytes);
  out.set_comm_scratch_bytes(memory.comm_scratch_bytes);
  return out;
}

std::vector<v1::CollectiveStats> ProtoConvert::CollectiveStatsToProto(
    v1::ProcessGroup group, int64_t group_size,
    const comm::CollectiveStats& stats) {
  const std::pair<comm::OpKind, v1::CollectiveKind> kinds[] = {
      {comm::OpKind::kAllGather, v1::COLLECTIVE_KIND_ALL_GATHER},
      {comm::OpKind::kReduceScatter, v1::COLLECTIVE_KIND_REDUCE_SCATTER},
      {comm::OpKind::kAllReduce, v1::COLLECTIVE_KIND_ALL_REDUCE}};
  std::vector<v1::CollectiveStats> out;
  for (const auto& [op, kind] : kinds) {
    const comm::OpCounters& c = stats.of(op);
    v1::CollectiveStats& entry = out.emplace_back();
    entry.set_kind(kind);
    entry.set_group(group);
    entry.set_calls(c.calls);
    entry.set_failures(c.failures);
    entry.set_buffer_bytes(c.bytes);
    // Ring algorithms on n ranks move (n-1)/n of the buffer each way for
    // all-gather and reduce-scatter, twice that for all-reduce (what the
    // Gloo backend runs); so FULL_SHARD shows 1.5x NO_SHARD's bytes.
    const int64_t n = group_size;
    const int64_t factor = op == comm::OpKind::kAllReduce ? 2 : 1;
    const int64_t wire = n > 1 ? c.bytes * factor * (n - 1) / n : 0;
    entry.set_bytes_sent(wire);
    entry.set_bytes_received(wire);
    entry.set_seconds(absl::ToDoubleSeconds(c.busy));
  }
  return out;
}

}  // namespace shardd::node
