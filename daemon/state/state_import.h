#ifndef SHARDD_DAEMON_STATE_STATE_IMPORT_H_
#define SHARDD_DAEMON_STATE_STATE_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/node/step_engine.h"
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
// ResumePointChooser). Staging memory is one unit's shard at a time.
//
// Errors name the file and the tensor: NOT_FOUND (missing file, tensor or
// common step), INVALID_ARGUMENT (shape, dtype), FAILED_PRECONDITION
// (another model or optimizer), DATA_LOSS (corrupt or truncated). On error
// the engine's sections hold garbage: the caller drops the engine (nothing
// was registered yet).
//
// Stateless; the caller serialises it against every other use of the
// engine (it runs before the engine is published).
class StateImport {
 public:
  // Overwrites the engine's state sections from `sources` and returns the
  // committed step the state belongs to (0 when only parameters were
  // loaded). The caller then calls engine.InstallState(step).
  static absl::StatusOr<int64_t> Apply(const ImportSources& sources,
                                       node::StepEngine& engine);
};

}  // namespace shardd::state

#endif  // SHARDD_DAEMON_STATE_STATE_IMPORT_H_
