#include "daemon/core/model_config.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace shardd::core {
namespace {

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// Shortest text that reads back as the same double ("0.001", not
// "0.0010000000000000000208").
std::string DoubleText(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::string_view AlignmentName(AlignmentMode mode) {
  switch (mode) {
    case AlignmentMode::kElement:
      return "ELEMENT";
    case AlignmentMode::kBlock:
      return "BLOCK";
    case AlignmentMode::kWholeTensor:
      return "WHOLE_TENSOR";
  }
  return "unknown";
}

absl::string_view InitKindName(InitKind kind) {
  switch (kind) {
    case InitKind::kZeros:
      return "zeros";
    case InitKind::kConstant:
      return "constant";
    case InitKind::kNormal:
      return "normal";
    case InitKind::kValues:
      return "values";
    case InitKind::kSharedMemory:
      return "shared_memory";
    case InitKind::kUniform:
      return "uniform";
    case InitKind::kCudaIpc:
      return "cuda_ipc";
  }
  return "unknown";
}

std::string OptionalDTypeText(const std::optional<DType>& dtype) {
  return dtype.has_value() ? std::string(DTypeName(*dtype)) : "unspecified";
}

// Receives the fields of two models in a fixed order (for a fingerprint the
// two are the same model). Each call returns false to stop the walk.
class FieldSink {
 public:
  virtual ~FieldSink() = default;
  virtual bool Int(const std::string& path, int64_t a, int64_t b) = 0;
  virtual bool Real(const std::string& path, double a, double b) = 0;
  // Strings, and enums given as (value, name).
  virtual bool Text(const std::string& path, absl::string_view a,
                    absl::string_view b) = 0;
  virtual bool Enum(const std::string& path, int64_t a, int64_t b,
                    absl::string_view a_name, absl::string_view b_name) = 0;
  virtual bool Shape(const std::string& path, absl::Span<const int64_t> a,
                     absl::Span<const int64_t> b) = 0;
  // Uploaded values; null counts as empty.
  virtual bool Bytes(const std::string& path, const std::string* a,
                     const std::string* b) = 0;
};

bool WalkInit(const std::string& path, const InitSpec& a, const InitSpec& b,
              FieldSink& sink) {
  if (!sink.Enum(path, static_cast<int>(a.kind), static_cast<int>(b.kind),
                 InitKindName(a.kind), InitKindName(b.kind))) {
    return false;
  }
  switch (a.kind) {
    case InitKind::kZeros:
      return true;
    case InitKind::kConstant:
      return sink.Real(path + ".constant.value", a.constant, b.constant);
    case InitKind::kNormal:
      return sink.Int(path + ".normal.seed", static_cast<int64_t>(a.seed),
                      static_cast<int64_t>(b.seed)) &&
             sink.Real(path + ".normal.mean", a.mean, b.mean) &&
             sink.Real(path + ".normal.std", a.std, b.std);
    case InitKind::kUniform:
      return sink.Int(path + ".uniform.seed", static_cast<int64_t>(a.seed),
                      static_cast<int64_t>(b.seed)) &&
             sink.Real(path + ".uniform.low", a.low, b.low) &&
             sink.Real(path + ".uniform.high", a.high, b.high);
    case InitKind::kValues:
      return sink.Enum(path + ".values.dtype", static_cast<int>(a.values_dtype),
                       static_cast<int>(b.values_dtype),
                       DTypeName(a.values_dtype), DTypeName(b.values_dtype)) &&
             sink.Bytes(path + ".values.data", a.values.get(), b.values.get());
    case InitKind::kSharedMemory:
      // Before the daemon reads the values in, only the reference exists.
      return sink.Text(path + ".shared_memory.path", a.shared_memory.path,
                       b.shared_memory.path) &&
             sink.Int(path + ".shared_memory.segment_bytes",
                      a.shared_memory.segment_bytes,
                      b.shared_memory.segment_bytes) &&
             sink.Int(path + ".shared_memory.byte_offset",
                      a.shared_memory.byte_offset,
                      b.shared_memory.byte_offset) &&
             sink.Int(path + ".shared_memory.byte_length",
                      a.shared_memory.byte_length, b.shared_memory.byte_length);
    case InitKind::kCudaIpc:
      // As for shared memory: only the reference exists here.
      return sink.Bytes(path + ".cuda_ipc.mem_handle", &a.cuda_ipc.mem_handle,
                        &b.cuda_ipc.mem_handle) &&
             sink.Int(path + ".cuda_ipc.device_ordinal",
                      a.cuda_ipc.device_ordinal, b.cuda_ipc.device_ordinal) &&
             sink.Text(path + ".cuda_ipc.pci_bus_id", a.cuda_ipc.pci_bus_id,
                       b.cuda_ipc.pci_bus_id) &&
             sink.Int(path + ".cuda_ipc.allocation_bytes",
                      a.cuda_ipc.allocation_bytes,
                      b.cuda_ipc.allocation_bytes) &&
             sink.Int(path + ".cuda_ipc.byte_offset", a.cuda_ipc.byte_offset,
                      b.cuda_ipc.byte_offset) &&
             sink.Int(path + ".cuda_ipc.byte_length", a.cuda_ipc.byte_length,
                      b.cuda_ipc.byte_length);
  }
  return true;
}

// The single list of fields that must agree across ranks; Fingerprint and
// CompareModels both use it, so they can never cover different fields.
void Walk(const ModelConfig& a, const ModelConfig& b, InitScope scope,
          FieldSink& sink) {
  const ShardingConfig& ca = a.config;
  const ShardingConfig& cb = b.config;
  if (!sink.Enum("config.strategy", static_cast<int>(ca.strategy),
                 static_cast<int>(cb.strategy),
                 ShardingStrategyName(ca.strategy),
                 ShardingStrategyName(cb.strategy)) ||
      !sink.Int("config.sharding_factor", ca.sharding_factor,
                cb.sharding_factor) ||
      !sink.Enum("config.param_dtype",
                 ca.param_dtype ? static_cast<int>(*ca.param_dtype) : 0,
                 cb.param_dtype ? static_cast<int>(*cb.param_dtype) : 0,
                 OptionalDTypeText(ca.param_dtype),
                 OptionalDTypeText(cb.param_dtype)) ||
      !sink.Enum("config.reduce_dtype",
                 ca.reduce_dtype ? static_cast<int>(*ca.reduce_dtype) : 0,
                 cb.reduce_dtype ? static_cast<int>(*cb.reduce_dtype) : 0,
                 OptionalDTypeText(ca.reduce_dtype),
                 OptionalDTypeText(cb.reduce_dtype))) {
    return;
  }
  const bool a_adamw = std::holds_alternative<AdamWOptions>(ca.optimizer);
  const bool b_adamw = std::holds_alternative<AdamWOptions>(cb.optimizer);
  if (!sink.Enum("config.optimizer", a_adamw ? 1 : 2, b_adamw ? 1 : 2,
                 a_adamw ? "adamw" : "sgd", b_adamw ? "adamw" : "sgd")) {
    return;
  }
  if (a_adamw) {
    const auto& oa = std::get<AdamWOptions>(ca.optimizer);
    const auto& ob = std::get<AdamWOptions>(cb.optimizer);
    if (!sink.Real("config.optimizer.adamw.lr", oa.lr, ob.lr) ||
        !sink.Real("config.optimizer.adamw.beta1", oa.beta1, ob.beta1) ||
        !sink.Real("config.optimizer.adamw.beta2", oa.beta2, ob.beta2) ||
        !sink.Real("config.optimizer.adamw.eps", oa.eps, ob.eps) ||
        !sink.Real("config.optimizer.adamw.weight_decay", oa.weight_decay,
                   ob.weight_decay)) {
      return;
    }
  } else {
    const auto& oa = std::get<SgdOptions>(ca.optimizer);
    const auto& ob = std::get<SgdOptions>(cb.optimizer);
    if (!sink.Real("config.optimizer.sgd.lr", oa.lr, ob.lr) ||
        !sink.Real("config.optimizer.sgd.momentum", oa.momentum, ob.momentum) ||
        !sink.Real("config.optimizer.sgd.dampening", oa.dampening,
                   ob.dampening) ||
        !sink.Int("config.optimizer.sgd.nesterov", oa.nesterov, ob.nesterov) ||
        !sink.Real("config.optimizer.sgd.weight_decay", oa.weight_decay,
                   ob.weight_decay)) {
      return;
    }
  }
  if (!sink.Real("config.max_grad_norm", ca.max_grad_norm, cb.max_grad_norm) ||
      !sink.Int("config.max_gathered_units", ca.max_gathered_units,
                cb.max_gathered_units) ||
      !sink.Int("units.size", static_cast<int64_t>(a.units.size()),
                static_cast<int64_t>(b.units.size()))) {
    return;
  }
  for (size_t u = 0; u < a.units.size(); ++u) {
    const UnitConfig& ua = a.units[u];
    const UnitConfig& ub = b.units[u];
    const std::string up = absl::StrCat("units[", u, "]");
    if (!sink.Text(up + ".name", ua.name, ub.name) ||
        !sink.Enum(up + ".alignment.mode", static_cast<int>(ua.alignment.mode),
                   static_cast<int>(ub.alignment.mode),
                   AlignmentName(ua.alignment.mode),
                   AlignmentName(ub.alignment.mode)) ||
        !sink.Int(up + ".alignment.block_elements", ua.alignment.block_elements,
                  ub.alignment.block_elements) ||
        !sink.Int(up + ".tensors.size", static_cast<int64_t>(ua.tensors.size()),
                  static_cast<int64_t>(ub.tensors.size()))) {
      return;
    }
    for (size_t t = 0; t < ua.tensors.size(); ++t) {
      const TensorConfig& ta = ua.tensors[t];
      const TensorConfig& tb = ub.tensors[t];
      const std::string tp = absl::StrCat(up, ".tensors[", t, "]");
      if (!sink.Text(tp + ".name", ta.spec.name, tb.spec.name) ||
          !sink.Shape(tp + ".shape", ta.spec.shape, tb.spec.shape) ||
          !sink.Enum(tp + ".dtype", static_cast<int>(ta.spec.dtype),
                     static_cast<int>(tb.spec.dtype), DTypeName(ta.spec.dtype),
                     DTypeName(tb.spec.dtype)) ||
          !sink.Int(tp + ".exclude_from_weight_decay",
                    ta.exclude_from_weight_decay,
                    tb.exclude_from_weight_decay)) {
        return;
      }
      if (scope == InitScope::kInclude &&
          !WalkInit(tp + ".init", ta.init, tb.init, sink)) {
        return;
      }
    }
  }
}

// FNV-style 64-bit word hash with a strong final mix: stable across
// machines and builds, and fast on uploaded values (8 bytes per step).
class HashSink : public FieldSink {
 public:
  uint64_t value() const {
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  bool Int(const std::string&, int64_t a, int64_t) override {
    Word(static_cast<uint64_t>(a));
    return true;
  }
  bool Real(const std::string&, double a, double) override {
    uint64_t bits;
    std::memcpy(&bits, &a, sizeof(bits));
    Word(bits);
    return true;
  }
  bool Text(const std::string&, absl::string_view a,
            absl::string_view) override {
    Raw(a.data(), a.size());
    return true;
  }
  bool Enum(const std::string&, int64_t a, int64_t, absl::string_view,
            absl::string_view) override {
    Word(static_cast<uint64_t>(a));
    return true;
  }
  bool Shape(const std::string&, absl::Span<const int64_t> a,
             absl::Span<const int64_t>) override {
    Word(a.size());
    for (int64_t d : a) Word(static_cast<uint64_t>(d));
    return true;
  }
  bool Bytes(const std::string&, const std::string* a,
             const std::string*) override {
    if (a == nullptr) {
      Word(0);
    } else {
      Raw(a->data(), a->size());
    }
    return true;
  }

 private:
  void Word(uint64_t word) {
    state_ = (state_ ^ word) * 0x100000001B3ull;
    state_ ^= state_ >> 29;
  }
  // Length first, so that adjacent strings cannot run into each other.
  void Raw(const char* data, size_t size) {
    Word(size);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t word;
      std::memcpy(&word, data + i, 8);
      Word(word);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, data + i, size - i);
    Word(tail);
  }

  uint64_t state_ = 0xCBF29CE484222325ull;
};

class CompareSink : public FieldSink {
 public:
  const absl::Status& status() const { return status_; }
  bool Int(const std::string& path, int64_t a, int64_t b) override {
    return a == b || Differ(path, absl::StrCat(a), absl::StrCat(b));
  }
  bool Real(const std::string& path, double a, double b) override {
    // Bit patterns, as the fingerprint: 0.0 and -0.0 are different configs.
    uint64_t bits_a, bits_b;
    std::memcpy(&bits_a, &a, 8);
    std::memcpy(&bits_b, &b, 8);
    return bits_a == bits_b || Differ(path, DoubleText(a), DoubleText(b));
  }
  bool Text(const std::string& path, absl::string_view a,
            absl::string_view b) override {
    return a == b ||
           Differ(path, absl::StrCat("'", a, "'"), absl::StrCat("'", b, "'"));
  }
  bool Enum(const std::string& path, int64_t a, int64_t b,
            absl::string_view a_name, absl::string_view b_name) override {
    return a == b || Differ(path, a_name, b_name);
  }
  bool Shape(const std::string& path, absl::Span<const int64_t> a,
             absl::Span<const int64_t> b) override {
    return a == b || Differ(path, ShapeText(a), ShapeText(b));
  }
  bool Bytes(const std::string& path, const std::string* a,
             const std::string* b) override {
    const absl::string_view va = a == nullptr ? "" : absl::string_view(*a);
    const absl::string_view vb = b == nullptr ? "" : absl::string_view(*b);
    if (va == vb) return true;
    if (va.size() != vb.size()) {
      return Differ(path, absl::StrCat(va.size(), " bytes"),
                    absl::StrCat(vb.size(), " bytes"));
    }
    size_t first = 0;
    while (va[first] == vb[first]) ++first;
    status_ = absl::FailedPreconditionError(
        absl::StrCat(path, ": the values differ, first at byte ", first));
    return false;
  }

 private:
  bool Differ(const std::string& path, absl::string_view a,
              absl::string_view b) {
    status_ =
        absl::FailedPreconditionError(absl::StrCat(path, ": ", a, " vs ", b));
    return false;
  }

  absl::Status status_;
};

absl::Status ValidateUnit(const UnitConfig& unit, const std::string& up) {
  if (unit.name.empty()) return Invalid(up + ".name", "must not be empty");
  if (unit.tensors.empty()) {
    return Invalid(up + ".tensors", "at least one tensor is required");
  }
  absl::flat_hash_map<absl::string_view, size_t> seen;
  for (size_t t = 0; t < unit.tensors.size(); ++t) {
    const TensorConfig& tensor = unit.tensors[t];
    const std::string tp = absl::StrCat(up, ".tensors[", t, "]");
    if (tensor.spec.name.empty()) {
      return Invalid(tp + ".name", "must not be empty");
    }
    auto [it, inserted] = seen.emplace(tensor.spec.name, t);
    if (!inserted) {
      return Invalid(tp + ".name",
                     absl::StrCat("'", tensor.spec.name, "' duplicates ", up,
                                  ".tensors[", it->second, "].name"));
    }
    if (!IsValidDType(tensor.spec.dtype)) {
      return Invalid(tp + ".dtype",
                     absl::StrCat("unsupported value ",
                                  static_cast<int>(tensor.spec.dtype)));
    }
    if (tensor.spec.dtype != unit.tensors[0].spec.dtype) {
      return Invalid(tp + ".dtype",
                     absl::StrCat(DTypeName(tensor.spec.dtype),
                                  " differs from ", up, ".tensors[0].dtype ",
                                  DTypeName(unit.tensors[0].spec.dtype),
                                  " (a unit's tensors share one dtype)"));
    }
    int64_t numel = 1;
    for (size_t d = 0; d < tensor.spec.shape.size(); ++d) {
      const int64_t dim = tensor.spec.shape[d];
      if (dim < 1) {
        return Invalid(absl::StrCat(tp, ".shape[", d, "]"),
                       absl::StrCat("must be >= 1, got ", dim));
      }
      if (__builtin_mul_overflow(numel, dim, &numel)) {
        return Invalid(tp + ".shape", "the element count overflows 64 bits");
      }
    }
    if (absl::Status status =
            TensorInit::Validate(tensor.init, numel, tensor.spec.dtype);
        !status.ok()) {
      return Prefixed(tp + ".init.", status);
    }
  }
  switch (unit.alignment.mode) {
    case AlignmentMode::kElement:
    case AlignmentMode::kWholeTensor:
      break;
    case AlignmentMode::kBlock:
      if (unit.alignment.block_elements < 1) {
        return Invalid(up + ".alignment.block_elements",
                       absl::StrCat("must be >= 1 for BLOCK alignment, got ",
                                    unit.alignment.block_elements));
      }
      break;
    default:
      return Invalid(up + ".alignment.mode",
                     absl::StrCat("unknown value ",
                                  static_cast<int>(unit.alignment.mode)));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const ShardingConfig& config) {
  if (const auto* adamw = std::get_if<AdamWOptions>(&config.optimizer)) {
    if (absl::Status status = AdamW::Create(*adamw).status(); !status.ok()) {
      return Prefixed("config.optimizer.", status);
    }
    // The API (common.proto) promises eps > 0, stricter than the kernel.
    if (!(adamw->eps > 0.0)) {
      return Invalid("config.optimizer.adamw.eps",
                     absl::StrCat("must be > 0, got ", adamw->eps));
    }
    return absl::OkStatus();
  }
  const auto& sgd = std::get<SgdOptions>(config.optimizer);
  if (absl::Status status = Sgd::Create(sgd).status(); !status.ok()) {
    return Prefixed("config.optimizer.", status);
  }
  if (!(sgd.dampening >= 0.0 && sgd.dampening <= 1.0)) {
    return Invalid("config.optimizer.sgd.dampening",
                   absl::StrCat("must be in [0, 1], got ", sgd.dampening));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const ModelConfig& model, int64_t world_size) {
  if (world_size < 1) {
    return Invalid("world_size",
                   absl::StrCat("must be >= 1, got ", world_size));
  }
  if (model.units.empty()) {
    return Invalid("units", "at least one unit is required");
  }
  absl::flat_hash_map<absl::string_view, size_t> seen;
  for (size_t u = 0; u < model.units.size(); ++u) {
    const std::string up = absl::StrCat("units[", u, "]");
    if (absl::Status status = ValidateUnit(model.units[u], up); !status.ok()) {
      return status;
    }
    auto [it, inserted] = seen.emplace(model.units[u].name, u);
    if (!inserted) {
      return Invalid(up + ".name",
                     absl::StrCat("'", model.units[u].name,
                                  "' duplicates units[", it->second, "].name"));
    }
  }
  const ShardingConfig& config = model.config;
  absl::StatusOr<ShardPlan> plan =
      ShardPlan::Create(world_size, config.strategy, config.sharding_factor);
  if (!plan.ok()) return Prefixed("config.", plan.status());
  if (config.param_dtype && !IsValidDType(*config.param_dtype)) {
    return Invalid("config.param_dtype",
                   absl::StrCat("unsupported value ",
                                static_cast<int>(*config.param_dtype)));
  }
  if (config.reduce_dtype && !IsValidDType(*config.reduce_dtype)) {
    return Invalid("config.reduce_dtype",
                   absl::StrCat("unsupported value ",
                                static_cast<int>(*config.reduce_dtype)));
  }
  if (absl::Status status = ValidateOptimizer(config); !status.ok()) {
    return status;
  }
  if (!std::isfinite(config.max_grad_norm) || config.max_grad_norm < 0.0) {
    return Invalid(
        "config.max_grad_norm",
        absl::StrCat("must be finite and >= 0 (0: no clipping), got ",
                     config.max_grad_norm));
  }
  if (config.max_reducing_units < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.max_reducing_units: must be >= 1, got ",
                     config.max_reducing_units));
  }
  if (config.max_gathered_units < 1) {
    return Invalid(
        "config.max_gathered_units",
        absl::StrCat("must be >= 1, got ", config.max_gathered_units));
  }
  // The layouts and the memory plan catch what remains (byte counts that
  // overflow 64 bits).
  absl::StatusOr<std::vector<UnitLayout>> layouts =
      BuildLayouts(model, plan->sharding_factor());
  if (!layouts.ok()) return layouts.status();
  absl::StatusOr<MemoryBreakdown> memory =
      MemoryPlan::ForRank(*layouts, *plan, 0, ToMemoryOptions(model));
  if (!memory.ok()) return Prefixed("memory plan: ", memory.status());
  return absl::OkStatus();
}

uint64_t Fingerprint(const ModelConfig& model, InitScope scope) {
  HashSink sink;
  Walk(model, model, scope, sink);
  return sink.value();
}

absl::Status CompareModels(const ModelConfig& mine, const ModelConfig& theirs,
                           InitScope scope) {
  CompareSink sink;
  Walk(mine, theirs, scope, sink);
  return sink.status();
}

DType GatheredDType(const ModelConfig& model, const UnitConfig& unit) {
  if (model.config.param_dtype.has_value()) return *model.config.param_dtype;
  return unit.tensors.empty() ? DType::kFloat32 : unit.tensors[0].spec.dtype;
}

UnitSpec ToUnitSpec(const ModelConfig& model, const UnitConfig& unit) {
  UnitSpec spec;
  spec.name = unit.name;
  const DType dtype = GatheredDType(model, unit);
  for (const TensorConfig& tensor : unit.tensors) {
    spec.tensors.push_back(tensor.spec);
    spec.tensors.back().dtype = dtype;
  }
  return spec;
}

absl::StatusOr<std::vector<UnitLayout>> BuildLayouts(const ModelConfig& model,
                                                     int64_t sharding_factor) {
  std::vector<UnitLayout> layouts;
  layouts.reserve(model.units.size());
  for (size_t u = 0; u < model.units.size(); ++u) {
    const UnitConfig& unit = model.units[u];
    absl::StatusOr<UnitLayout> layout = UnitLayout::Create(
        ToUnitSpec(model, unit), sharding_factor, unit.alignment);
    if (!layout.ok()) {
      return Prefixed(absl::StrCat("units[", u, "]: "), layout.status());
    }
    layouts.push_back(*std::move(layout));
  }
  return layouts;
}

MemoryOptions ToMemoryOptions(const ModelConfig& model) {
  MemoryOptions options;
  if (const auto* sgd = std::get_if<SgdOptions>(&model.config.optimizer)) {
    options.optimizer = sgd->momentum != 0.0 ? OptimizerKind::kSgdMomentum
                                             : OptimizerKind::kSgd;
  } else {
    options.optimizer = OptimizerKind::kAdamW;
  }
  options.max_gathered_units = model.config.max_gathered_units;
  options.max_reducing_units = model.config.max_reducing_units;
  if (model.config.reduce_dtype.has_value()) {
    options.reduce_dtype = *model.config.reduce_dtype;
  } else if (model.config.param_dtype.has_value()) {
    options.reduce_dtype = *model.config.param_dtype;
  } else {
    // Units in their own dtypes: one reduce slot must fit any of them.
    std::optional<DType> common;
    bool mixed = false;
    for (const UnitConfig& unit : model.units) {
      const DType dtype = GatheredDType(model, unit);
      if (common.has_value() && *common != dtype) mixed = true;
      common = dtype;
    }
    options.reduce_dtype =
        common.has_value() && !mixed ? *common : DType::kFloat32;
  }
  return options;
}

}  // namespace shardd::core
