#include "daemon/comm/collective.h"

#include <memory>

namespace shardd::comm {
namespace {

// Work that was complete and successful when made.
class DoneWork : public Work {
 public:
  absl::Status Wait() override { return absl::OkStatus(); }
  bool Done() const override { return true; }
};

}  // namespace

std::shared_ptr<Work> Collective::ReserveScratch(int64_t /*bytes*/) {
  return std::make_shared<DoneWork>();
}

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
