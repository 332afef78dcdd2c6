#ifndef SHARDD_DAEMON_STATE_STATE_IMPORT_H_
#define SHARDD_DAEMON_STATE_STATE_IMPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/model_config.h"
#include "daemon/node/step_engine.h"
#include "shardd/v1/peer.pb.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::state {

// Where a new job's initial state comes from besides its init values
// (RegisterModelRequest.load_from / resume_from, TensorInit.file, the
// shardd flag --resume_from).
struct ImportSources {
  // A safetensors file (PyTorch / Hugging Face names "<unit>.<tensor>", or
  // our FULL export) or a directory of our SHARDED export.
  std::string load_from;
  // A checkpoint directory (DIR/rank-R/step-N.shardckpt) of a stopped job.
  std::string resume_from;
  // TensorInit.file of single tensors.
  struct TensorFile {
    int unit = 0;
    int tensor = 0;
    std::string path;
    std::string name;  // In the file.
  };
  std::vector<TensorFile> tensor_files;

  bool empty() const {
    return load_from.empty() && resume_from.empty() && tensor_files.empty();
  }
  // From a request; `resume_flag` (--resume_from) applies when the request
  // names no source of its own. INVALID_ARGUMENT naming the field for a
  // relative path or both load_from and resume_from.
  static absl::StatusOr<ImportSources> FromRequest(
      const v1::RegisterModelRequest& request, const std::string& resume_flag);
};

// Loads saved state into a freshly created engine's shard: parameters
// (and, where the source has them, optimizer state and step) of exactly the
// element ranges this rank owns, read with positioned reads from whichever
// files hold them, whatever W and F wrote them (ReshardMap over the saved
// layout). Sources: a safetensors file by tensor name, our SHARDED export,
// our sharded checkpoints (the latest step every old rank holds intact,
// ResumePointChooser), single tensors' TensorInit.file. Host shards are
// read into in place (no staging); device shards through one staging
// buffer of at most ShardFiller::kDefaultStagingBytes.
//
// Two phases, so that a bad source fails registration before this rank
// agrees on the model with the others (then no rank registers): Plan opens
// every file and checks all that can be checked without reading values
// (headers, names, shapes, dtypes, layouts, the optimizer; the resume
// point's checkpoint CRCs); Apply reads this rank's values into the engine
// and installs the step.
//
// Errors name the file and the tensor: NOT_FOUND (missing file, tensor or
// common step), INVALID_ARGUMENT (shape, dtype, a bad request field),
// FAILED_PRECONDITION (another model or optimizer), DATA_LOSS (corrupt or
// truncated). After an Apply error the engine's sections hold garbage: the
// caller drops the engine (nothing was registered yet).
//
// Immutable after Plan; Apply may run on several engines. The caller
// serialises Apply against every other use of the engine (it runs before
// the engine is published). Owns the open files it planned.
class StateImport {
 public:
  // The sources of `request` (ImportSources::FromRequest, with the shardd
  // flag --resume_from) checked against `model` laid out for F = factor.
  static absl::StatusOr<StateImport> Plan(
      const v1::RegisterModelRequest& request, const std::string& resume_flag,
      const core::ModelConfig& model, int64_t sharding_factor);
  static absl::StatusOr<StateImport> Plan(const ImportSources& sources,
                                          const core::ModelConfig& model,
                                          int64_t sharding_factor);

  bool empty() const { return saved_ == nullptr && tensors_ == nullptr; }

  // What the ranks compare before any registers (ModelAgreement
  // .state_source): the saved state's field, path, step and a digest of
  // its files' sizes and headers. Empty (no field) when there is none;
  // TensorInit.file paths are part of the model's own digest.
  const v1::StateSourceDigest& source_digest() const;

  // Overwrites the engine's state sections (its rank's ranges) and, unless
  // empty(), installs the saved step (engine.InstallState: 0 when only
  // parameters were loaded). Returns that step.
  absl::StatusOr<int64_t> Apply(node::StepEngine& engine) const;

  struct Saved;
  struct Tensors;

 private:
  StateImport() = default;
  std::shared_ptr<const Saved> saved_;
  std::shared_ptr<const Tensors> tensors_;
};

}  // namespace shardd::state

#endif  // SHARDD_DAEMON_STATE_STATE_IMPORT_H_
