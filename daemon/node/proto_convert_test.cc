#include "daemon/node/proto_convert.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

// Two units, AdamW, HYBRID_SHARD with F = 2, every init kind.
v1::ModelSpec ValidSpec() {
  v1::ModelSpec spec;
  v1::UnitSpec* unit = spec.add_units();
  unit->set_name("embed");
  v1::TensorSpec* weight = unit->add_tensors();
  weight->set_name("weight");
  weight->add_shape(16);
  weight->add_shape(8);
  weight->set_dtype(v1::DTYPE_FP32);
  weight->mutable_init()->mutable_normal()->set_seed(7);
  weight->mutable_init()->mutable_normal()->set_std(0.02f);
  v1::TensorSpec* bias = unit->add_tensors();
  bias->set_name("bias");
  bias->add_shape(16);
  bias->set_dtype(v1::DTYPE_FP32);
  bias->set_exclude_from_weight_decay(true);
  bias->mutable_init()->mutable_values()->set_data(std::string(64, '\1'));

  v1::UnitSpec* head = spec.add_units();
  head->set_name("head");
  head->mutable_alignment()->set_mode(v1::ALIGNMENT_MODE_BLOCK);
  head->mutable_alignment()->set_block_elements(4);
  v1::TensorSpec* w = head->add_tensors();
  w->set_name("w");
  w->add_shape(8);
  w->set_dtype(v1::DTYPE_BF16);
  w->mutable_init()->mutable_constant()->set_value(0.5f);
  v1::TensorSpec* scale = head->add_tensors();
  scale->set_name("scale");
  scale->set_dtype(v1::DTYPE_BF16);  // A scalar; init unset: zeros.

  v1::ShardingConfig* config = spec.mutable_config();
  config->set_strategy(v1::SHARDING_STRATEGY_HYBRID_SHARD);
  config->set_sharding_factor(2);
  config->set_reduce_dtype(v1::DTYPE_FP32);
  v1::AdamW* adamw = config->mutable_optimizer()->mutable_adamw();
  adamw->set_lr(1e-3);
  adamw->set_beta1(0.9);
  adamw->set_beta2(0.999);
  adamw->set_eps(1e-8);
  adamw->set_weight_decay(0.01);
  config->set_max_grad_norm(1.0);
  return spec;
}

void ExpectInvalid(const v1::ModelSpec& spec, absl::string_view field) {
  const absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(spec);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find(field), absl::string_view::npos)
      << "expected '" << field << "' in: " << model.status().message();
}

class ProtoConvertTest : public ::testing::Test {};

TEST_F(ProtoConvertTest, ConvertsEveryFieldAndResolvesDefaults) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(ValidSpec());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->units.size(), 2u);
  const core::UnitConfig& embed = model->units[0];
  EXPECT_EQ(embed.name, "embed");
  EXPECT_EQ(embed.alignment.mode, core::AlignmentMode::kElement);
  EXPECT_EQ(embed.tensors[0].spec.shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(embed.tensors[0].init.kind, core::InitKind::kNormal);
  EXPECT_EQ(embed.tensors[0].init.seed, 7u);
  EXPECT_EQ(embed.tensors[1].init.kind, core::InitKind::kValues);
  EXPECT_EQ(embed.tensors[1].init.values->size(), 64u);
  EXPECT_TRUE(embed.tensors[1].exclude_from_weight_decay);
  const core::UnitConfig& head = model->units[1];
  EXPECT_EQ(head.alignment.mode, core::AlignmentMode::kBlock);
  EXPECT_EQ(head.alignment.block_elements, 4);
  EXPECT_EQ(head.tensors[0].spec.dtype, core::DType::kBFloat16);
  EXPECT_TRUE(head.tensors[1].spec.shape.empty());
  EXPECT_EQ(head.tensors[1].init.kind, core::InitKind::kZeros);
  EXPECT_EQ(model->config.strategy, core::ShardingStrategy::kHybridShard);
  EXPECT_EQ(model->config.sharding_factor, 2);
  EXPECT_FALSE(model->config.param_dtype.has_value());
  EXPECT_EQ(model->config.reduce_dtype, core::DType::kFloat32);
  EXPECT_EQ(std::get<core::AdamWOptions>(model->config.optimizer).lr, 1e-3);
  EXPECT_EQ(model->config.max_grad_norm, 1.0);
  EXPECT_EQ(model->config.max_gathered_units, 2);  // 0 means 2.
  EXPECT_EQ(model->config.max_reducing_units, 2);  // 0 means 2.
  EXPECT_TRUE(core::Validate(*model, 4).ok()) << core::Validate(*model, 4);
}

TEST_F(ProtoConvertTest, RoundTripGivesTheSameModel) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(ValidSpec());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<core::ModelConfig> again =
      ProtoConvert::ModelFromProto(ProtoConvert::ModelToProto(*model));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(core::CompareModels(*model, *again).ok())
      << core::CompareModels(*model, *again);
  EXPECT_EQ(core::Fingerprint(*model), core::Fingerprint(*again));
}

TEST_F(ProtoConvertTest, UnsetStrategyAndAlignmentTakeTheirDefaults) {
  v1::ModelSpec spec = ValidSpec();
  spec.mutable_config()->clear_strategy();
  spec.mutable_config()->clear_sharding_factor();
  spec.mutable_config()->mutable_default_alignment()->set_mode(
      v1::ALIGNMENT_MODE_WHOLE_TENSOR);
  absl::StatusOr<core::ModelConfig> model = ProtoConvert::ModelFromProto(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->config.strategy, core::ShardingStrategy::kFullShard);
  // Unit 0 sets none: the default; unit 1 keeps its own.
  EXPECT_EQ(model->units[0].alignment.mode, core::AlignmentMode::kWholeTensor);
  EXPECT_EQ(model->units[1].alignment.mode, core::AlignmentMode::kBlock);
}

TEST_F(ProtoConvertTest, SgdIsConverted) {
  v1::ModelSpec spec = ValidSpec();
  v1::Sgd* sgd = spec.mutable_config()->mutable_optimizer()->mutable_sgd();
  sgd->set_lr(0.1);
  sgd->set_momentum(0.9);
  sgd->set_nesterov(true);
  absl::StatusOr<core::ModelConfig> model = ProtoConvert::ModelFromProto(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& options = std::get<core::SgdOptions>(model->config.optimizer);
  EXPECT_EQ(options.lr, 0.1);
  EXPECT_EQ(options.momentum, 0.9);
  EXPECT_TRUE(options.nesterov);
}

TEST_F(ProtoConvertTest, UnspecifiedTensorDtypeIsRejected) {
  v1::ModelSpec spec = ValidSpec();
  spec.mutable_units(1)->mutable_tensors(0)->clear_dtype();
  ExpectInvalid(spec, "model.units[1].tensors[0].dtype: required");
}

TEST_F(ProtoConvertTest, UnknownEnumValuesAreRejected) {
  v1::ModelSpec spec = ValidSpec();
  spec.mutable_units(0)->mutable_tensors(0)->set_dtype(
      static_cast<v1::DType>(42));
  ExpectInvalid(spec, "model.units[0].tensors[0].dtype: unknown value 42");
  spec = ValidSpec();
  spec.mutable_config()->set_strategy(static_cast<v1::ShardingStrategy>(9));
  ExpectInvalid(spec, "model.config.strategy: unknown value 9");
  spec = ValidSpec();
  spec.mutable_config()->set_param_dtype(static_cast<v1::DType>(5));
  ExpectInvalid(spec, "model.config.param_dtype");
  spec = ValidSpec();
  spec.mutable_units(1)->mutable_alignment()->set_mode(
      static_cast<v1::AlignmentMode>(7));
  ExpectInvalid(spec, "model.units[1].alignment.mode");
}

TEST_F(ProtoConvertTest, MissingOptimizerIsRejected) {
  v1::ModelSpec spec = ValidSpec();
  spec.mutable_config()->clear_optimizer();
  ExpectInvalid(spec, "model.config.optimizer: required");
}

TEST_F(ProtoConvertTest, NegativeNumbersAreRejected) {
  v1::ModelSpec spec = ValidSpec();
  spec.mutable_config()->set_sharding_factor(-2);
  ExpectInvalid(spec, "model.config.sharding_factor");
  spec = ValidSpec();
  spec.mutable_config()->set_max_gathered_units(-1);
  ExpectInvalid(spec, "model.config.max_gathered_units");
  spec.mutable_config()->set_max_gathered_units(0);
  spec.mutable_config()->set_max_reducing_units(-1);
  ExpectInvalid(spec, "model.config.max_reducing_units");
  spec = ValidSpec();
  spec.mutable_config()->set_max_grad_norm(-0.5);
  ExpectInvalid(spec, "model.config.max_grad_norm");
  spec = ValidSpec();
  spec.mutable_units(1)->mutable_alignment()->set_block_elements(-4);
  ExpectInvalid(spec, "model.units[1].alignment.block_elements");
  spec = ValidSpec();
  spec.mutable_units(0)
      ->mutable_tensors(0)
      ->mutable_init()
      ->mutable_normal()
      ->set_std(-1.0f);
  ExpectInvalid(spec, "model.units[0].tensors[0].init.normal.std");
  spec = ValidSpec();
  spec.mutable_units(0)
      ->mutable_tensors(1)
      ->mutable_init()
      ->mutable_shared_memory()
      ->set_byte_offset(-1);
  ExpectInvalid(spec, "model.units[0].tensors[1].init.shared_memory");
}

TEST_F(ProtoConvertTest, BlockSizeMustFitTheMode) {
  v1::ModelSpec spec = ValidSpec();
  spec.mutable_units(1)->mutable_alignment()->set_block_elements(0);
  ExpectInvalid(spec, "model.units[1].alignment.block_elements: must be >= 1");
  spec = ValidSpec();
  spec.mutable_config()->mutable_default_alignment()->set_block_elements(8);
  ExpectInvalid(spec,
                "model.config.default_alignment.block_elements: must be 0");
}

TEST_F(ProtoConvertTest, SharedMemoryInitIsKeptAsAReference) {
  v1::ModelSpec spec = ValidSpec();
  v1::SharedMemoryRef* ref = spec.mutable_units(0)
                                 ->mutable_tensors(1)
                                 ->mutable_init()
                                 ->mutable_shared_memory();
  ref->set_path("/dev/shm/trainer-init");
  ref->set_segment_bytes(4096);
  ref->set_byte_offset(128);
  ref->set_byte_length(64);
  absl::StatusOr<core::ModelConfig> model = ProtoConvert::ModelFromProto(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const core::InitSpec& init = model->units[0].tensors[1].init;
  EXPECT_EQ(init.kind, core::InitKind::kSharedMemory);
  EXPECT_EQ(init.shared_memory.path, "/dev/shm/trainer-init");
  EXPECT_EQ(init.shared_memory.byte_offset, 128);
  EXPECT_TRUE(core::Validate(*model, 4).ok()) << core::Validate(*model, 4);
}

// Tensor "bias" (16 fp32) of ValidSpec in a trainer's device buffer.
v1::ModelSpec CudaIpcSpec() {
  v1::ModelSpec spec = ValidSpec();
  v1::CudaIpcRef* ref = spec.mutable_units(0)
                            ->mutable_tensors(1)
                            ->mutable_init()
                            ->mutable_cuda_ipc();
  ref->set_mem_handle(std::string(64, '\7'));
  ref->set_device_ordinal(1);
  ref->set_pci_bus_id("0000:3b:00.0");
  ref->set_allocation_bytes(4096);
  ref->set_byte_offset(128);
  ref->set_byte_length(64);
  return spec;
}

v1::CudaIpcRef* BiasRef(v1::ModelSpec& spec) {
  return spec.mutable_units(0)
      ->mutable_tensors(1)
      ->mutable_init()
      ->mutable_cuda_ipc();
}

TEST_F(ProtoConvertTest, CudaIpcInitIsKeptAsAReferenceAndRoundTrips) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(CudaIpcSpec());
  ASSERT_TRUE(model.ok()) << model.status();
  const core::InitSpec& init = model->units[0].tensors[1].init;
  EXPECT_EQ(init.kind, core::InitKind::kCudaIpc);
  EXPECT_EQ(init.cuda_ipc.mem_handle, std::string(64, '\7'));
  EXPECT_EQ(init.cuda_ipc.device_ordinal, 1);
  EXPECT_EQ(init.cuda_ipc.pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(init.cuda_ipc.allocation_bytes, 4096);
  EXPECT_EQ(init.cuda_ipc.byte_offset, 128);
  EXPECT_EQ(init.cuda_ipc.byte_length, 64);
  EXPECT_TRUE(core::Validate(*model, 4).ok()) << core::Validate(*model, 4);
  absl::StatusOr<core::ModelConfig> again =
      ProtoConvert::ModelFromProto(ProtoConvert::ModelToProto(*model));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(core::CompareModels(*model, *again).ok());
  // Another handle is another model (before the digest reads the values).
  v1::ModelSpec other = CudaIpcSpec();
  BiasRef(other)->set_mem_handle(std::string(64, '\6'));
  absl::StatusOr<core::ModelConfig> changed =
      ProtoConvert::ModelFromProto(other);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(core::CompareModels(*model, *changed).ok());
}

TEST_F(ProtoConvertTest, RejectsBadCudaIpcRefsNamingTheField) {
  const std::string field = "model.units[0].tensors[1].init.cuda_ipc";
  v1::ModelSpec spec = CudaIpcSpec();
  BiasRef(spec)->set_mem_handle(std::string(63, '\7'));
  ExpectInvalid(spec, field + ".mem_handle: must be the 64 bytes");
  spec = CudaIpcSpec();
  BiasRef(spec)->set_ready_event_handle(std::string(64, '\1'));
  ExpectInvalid(spec, field + ".ready_event_handle");
  spec = CudaIpcSpec();
  BiasRef(spec)->set_device_ordinal(-1);
  ExpectInvalid(spec, field + ".device_ordinal");
  spec = CudaIpcSpec();
  BiasRef(spec)->set_allocation_bytes(-1);
  ExpectInvalid(spec, field + ".allocation_bytes");
  spec = CudaIpcSpec();
  BiasRef(spec)->set_byte_length(8192);
  ExpectInvalid(spec, field + ".byte_length");
  spec = CudaIpcSpec();
  BiasRef(spec)->set_byte_offset(4096 - 32);
  ExpectInvalid(spec, field + ".byte_offset: range [4064, +64)");
  spec = CudaIpcSpec();
  BiasRef(spec)->set_byte_offset(-4);
  ExpectInvalid(spec, field + ".byte_offset");
  // Whole fp32 elements, aligned to them.
  spec = CudaIpcSpec();
  BiasRef(spec)->set_byte_length(62);
  ExpectInvalid(spec, field + ".byte_length: 62 bytes is not a whole number");
  spec = CudaIpcSpec();
  BiasRef(spec)->set_byte_offset(130);
  ExpectInvalid(spec, field + ".byte_offset: must be a multiple of 4");
  // The tensor's size is core::Validate's: 16 fp32 elements are 64 bytes.
  spec = CudaIpcSpec();
  BiasRef(spec)->set_byte_length(60);
  absl::StatusOr<core::ModelConfig> model = ProtoConvert::ModelFromProto(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const absl::Status s = core::Validate(*model, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("units[0].tensors[1].init.cuda_ipc.byte_length: "
                             "60 bytes, expected 64"),
            absl::string_view::npos)
      << s.message();
}

TEST_F(ProtoConvertTest, MemoryBreakdownMapsEveryField) {
  core::MemoryBreakdown memory;
  memory.parameter_shard_bytes = 1;
  memory.lowp_parameter_shard_bytes = 2;
  memory.gradient_shard_bytes = 3;
  memory.optimizer_state_bytes = 4;
  memory.gathered_parameter_bytes = 5;
  memory.unsharded_gradient_bytes = 6;
  memory.shard_padding_bytes = 7;
  memory.peak_parameter_bytes = 8;
  memory.total_bytes = 21;
  const v1::MemoryBreakdown proto = ProtoConvert::MemoryToProto(memory);
  EXPECT_EQ(proto.parameter_shard_bytes(), 1);
  EXPECT_EQ(proto.low_precision_parameter_bytes(), 2);
  EXPECT_EQ(proto.gradient_shard_bytes(), 3);
  EXPECT_EQ(proto.optimizer_state_bytes(), 4);
  EXPECT_EQ(proto.gathered_parameter_bytes(), 5);
  EXPECT_EQ(proto.unsharded_gradient_bytes(), 6);
  EXPECT_EQ(proto.padding_bytes(), 7);
  EXPECT_EQ(proto.peak_parameter_bytes(), 8);
  EXPECT_EQ(proto.total_bytes(), 21);
}

TEST_F(ProtoConvertTest, UniformInitRoundTrips) {
  v1::ModelSpec spec = ValidSpec();
  v1::UniformInit* uniform = spec.mutable_units(0)
                                 ->mutable_tensors(0)
                                 ->mutable_init()
                                 ->mutable_uniform();
  uniform->set_seed(11);
  uniform->set_low(-0.25f);
  uniform->set_high(0.5f);
  absl::StatusOr<core::ModelConfig> model = ProtoConvert::ModelFromProto(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const core::InitSpec& init = model->units[0].tensors[0].init;
  EXPECT_EQ(init.kind, core::InitKind::kUniform);
  EXPECT_EQ(init.seed, 11u);
  EXPECT_EQ(init.low, -0.25f);
  EXPECT_EQ(init.high, 0.5f);
  const v1::ModelSpec back = ProtoConvert::ModelToProto(*model);
  EXPECT_EQ(back.units(0).tensors(0).init().uniform().DebugString(),
            uniform->DebugString());
}

TEST_F(ProtoConvertTest, RejectsUniformWithoutLowBelowHigh) {
  v1::ModelSpec spec = ValidSpec();
  v1::UniformInit* uniform = spec.mutable_units(0)
                                 ->mutable_tensors(0)
                                 ->mutable_init()
                                 ->mutable_uniform();
  uniform->set_low(1.0f);
  uniform->set_high(1.0f);
  ExpectInvalid(spec, "units[0].tensors[0].init.uniform.high");
  uniform->set_low(std::numeric_limits<float>::infinity());
  uniform->set_high(2.0f);
  ExpectInvalid(spec, "units[0].tensors[0].init.uniform.low");
  uniform->set_low(0.0f);
  uniform->set_high(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(spec, "units[0].tensors[0].init.uniform.high");
}

TEST(CollectiveStatsToProtoTest, RingBytesOnTheWirePerCollective) {
  comm::CollectiveStats stats;
  comm::OpCounters& gather =
      stats.ops[static_cast<int>(comm::OpKind::kAllGather)];
  gather.calls = 3;
  gather.failures = 1;
  gather.bytes = 400;
  gather.busy = absl::Milliseconds(250);
  stats.ops[static_cast<int>(comm::OpKind::kAllReduce)].bytes = 400;
  stats.ops[static_cast<int>(comm::OpKind::kBroadcast)].bytes =
      999;  // Not shown.
  const std::vector<v1::CollectiveStats> out =
      ProtoConvert::CollectiveStatsToProto(v1::PROCESS_GROUP_SHARD, 4, stats);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].kind(), v1::COLLECTIVE_KIND_ALL_GATHER);
  EXPECT_EQ(out[1].kind(), v1::COLLECTIVE_KIND_REDUCE_SCATTER);
  EXPECT_EQ(out[2].kind(), v1::COLLECTIVE_KIND_ALL_REDUCE);
  EXPECT_EQ(out[0].group(), v1::PROCESS_GROUP_SHARD);
  EXPECT_EQ(out[0].calls(), 3);
  EXPECT_EQ(out[0].failures(), 1);
  EXPECT_EQ(out[0].buffer_bytes(), 400);
  EXPECT_DOUBLE_EQ(out[0].seconds(), 0.25);
  // Ring on 4 ranks: 3/4 of the buffer each way, twice for all-reduce.
  EXPECT_EQ(out[0].bytes_sent(), 300);
  EXPECT_EQ(out[0].bytes_received(), 300);
  EXPECT_EQ(out[1].bytes_sent(), 0);
  EXPECT_EQ(out[2].bytes_sent(), 600);
  // One rank moves nothing.
  EXPECT_EQ(ProtoConvert::CollectiveStatsToProto(v1::PROCESS_GROUP_REPLICA, 1,
                                                 stats)[2]
                .bytes_sent(),
            0);
}

}  // namespace
}  // namespace shardd::node
