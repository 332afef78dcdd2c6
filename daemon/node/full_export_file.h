#ifndef SHARDD_DAEMON_NODE_FULL_EXPORT_FILE_H_
#define SHARDD_DAEMON_NODE_FULL_EXPORT_FILE_H_

#include <cstdint>

#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

// Whether the file `request` names is already a complete FULL export of
// `step` as the request asks for it: safetensors whose header matches the
// file's size, metadata format "shardd", layout "full", the step, and the
// optimizer state included exactly when the request includes it. What rank
// 0's retry of an export finds when the attempt that wrote the file ended
// before its trainer heard (ExportRendezvous::Options::written). False for
// a missing, short or unreadable file. Reads only the header.
bool FileHoldsFullExport(const v1::ExportStateRequest& request, int64_t step);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_FULL_EXPORT_FILE_H_
