#include "daemon/comm/collective.h"

namespace shardd::comm {

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllGather:
      return "all-gather";
    case OpKind::kReduceScatter:
      return "reduce-scatter";
    case OpKind::kAllReduce:
      return "all-reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kNumOpKinds:
      break;
  }
  return "unknown";
}

}  // namespace shardd::comm
