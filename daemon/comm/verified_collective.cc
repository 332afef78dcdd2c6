#include "daemon/comm/verified_collective.h"

#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/comm/completion_work.h"

namespace shardd::comm {
namespace {

static_assert(std::is_trivially_copyable_v<OpDescriptor>);
static_assert(sizeof(OpDescriptor) % sizeof(float) == 0);
constexpr int64_t kDescriptorWords = sizeof(OpDescriptor) / sizeof(float);

std::shared_ptr<Work> Failed(absl::Status status) {
  auto work = std::make_shared<CompletionWork>();
  work->Complete(std::move(status));
  return work;
}

}  // namespace

bool OpDescriptor::operator==(const OpDescriptor& other) const {
  return sequence == other.sequence && kind == other.kind &&
         dtype == other.dtype && reduce_op == other.reduce_op &&
         root == other.root && elements == other.elements &&
         counts_hash == other.counts_hash && tag == other.tag;
}

std::string OpDescriptor::ToString() const {
  std::string s =
      absl::StrCat("op #", sequence, " ",
                   kind >= 0 && kind < static_cast<int>(OpKind::kNumOpKinds)
                       ? OpKindName(static_cast<OpKind>(kind))
                       : absl::StrCat("kind ", kind));
  if (static_cast<OpKind>(kind) == OpKind::kBarrier) return s;
  absl::StrAppend(&s, " of ", elements, " ",
                  core::DTypeName(static_cast<core::DType>(dtype)));
  if (reduce_op >= 0) {
    absl::StrAppend(&s, static_cast<ReduceOp>(reduce_op) == ReduceOp::kSum
                            ? " (sum)"
                            : " (average)");
  }
  if (root >= 0) absl::StrAppend(&s, " from root ", root);
  if (counts_hash != 0) absl::StrAppend(&s, " (counts ", counts_hash, ")");
  if (tag != 0) absl::StrAppend(&s, " tag ", absl::Hex(tag));
  return s;
}

VerifiedCollective::VerifiedCollective(std::shared_ptr<Collective> inner,
                                       std::string group)
    : inner_(std::move(inner)), group_(std::move(group)) {}

uint64_t VerifiedCollective::HashCounts(const std::vector<int64_t>& counts) {
  uint64_t hash = 14695981039346656037ull;
  for (int64_t c : counts) {
    for (int i = 0; i < 8; ++i) {
      hash ^= static_cast<uint64_t>(c >> (8 * i)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

absl::Status VerifiedCollective::Compare(const std::vector<OpDescriptor>& all,
                                         int rank, int64_t epoch,
                                         absl::string_view group) {
  for (size_t q = 0; q < all.size(); ++q) {
    if (all[q] == all[rank]) continue;
    return absl::InternalError(absl::StrCat(
        "collectives do not match on epoch ", epoch, " group '", group,
        "': rank ", rank, " issued ", all[rank].ToString(), ", rank ", q,
        " issued ", all[q].ToString(),
        " (ranks must issue the same collectives in the same order)"));
  }
  return absl::OkStatus();
}

template <typename IssueFn>
std::shared_ptr<Work> VerifiedCollective::Verified(OpDescriptor descriptor,
                                                   const OpOptions& options,
                                                   IssueFn&& issue) {
  absl::MutexLock lock(&mu_);
  descriptor.sequence = sequence_++;
  descriptor.tag = options.match_tag;
  std::vector<OpDescriptor> all(static_cast<size_t>(size()));
  OpOptions exchange = options;
  exchange.caller_waits = true;
  absl::Status exchanged =
      inner_
          ->AllGather(&descriptor, all.data(),
                      std::vector<int64_t>(all.size(), kDescriptorWords),
                      core::DType::kFloat32, exchange)
          ->Wait();
  if (!exchanged.ok()) return Failed(std::move(exchanged));
  if (absl::Status s = Compare(all, rank(), epoch(), group_); !s.ok()) {
    inner_->Abort(s.message());
    return Failed(std::move(s));
  }
  return issue();
}

std::shared_ptr<Work> VerifiedCollective::AllGather(
    const void* input, void* output, const std::vector<int64_t>& counts,
    core::DType dtype, const OpOptions& options) {
  OpDescriptor d;
  d.kind = static_cast<int32_t>(OpKind::kAllGather);
  d.dtype = static_cast<int32_t>(dtype);
  for (int64_t c : counts) d.elements += c;
  d.counts_hash = HashCounts(counts);
  return Verified(d, options, [&] {
    return inner_->AllGather(input, output, counts, dtype, options);
  });
}

std::shared_ptr<Work> VerifiedCollective::ReduceScatter(
    const void* input, void* output, const std::vector<int64_t>& counts,
    core::DType dtype, ReduceOp op, const OpOptions& options) {
  OpDescriptor d;
  d.kind = static_cast<int32_t>(OpKind::kReduceScatter);
  d.dtype = static_cast<int32_t>(dtype);
  d.reduce_op = static_cast<int32_t>(op);
  for (int64_t c : counts) d.elements += c;
  d.counts_hash = HashCounts(counts);
  return Verified(d, options, [&] {
    return inner_->ReduceScatter(input, output, counts, dtype, op, options);
  });
}

std::shared_ptr<Work> VerifiedCollective::AllReduce(void* buffer, int64_t count,
                                                    core::DType dtype,
                                                    ReduceOp op,
                                                    const OpOptions& options) {
  OpDescriptor d;
  d.kind = static_cast<int32_t>(OpKind::kAllReduce);
  d.dtype = static_cast<int32_t>(dtype);
  d.reduce_op = static_cast<int32_t>(op);
  d.elements = count;
  return Verified(d, options, [&] {
    return inner_->AllReduce(buffer, count, dtype, op, options);
  });
}

std::shared_ptr<Work> VerifiedCollective::Broadcast(void* buffer, int64_t count,
                                                    core::DType dtype, int root,
                                                    const OpOptions& options) {
  OpDescriptor d;
  d.kind = static_cast<int32_t>(OpKind::kBroadcast);
  d.dtype = static_cast<int32_t>(dtype);
  d.root = root;
  d.elements = count;
  return Verified(d, options, [&] {
    return inner_->Broadcast(buffer, count, dtype, root, options);
  });
}

std::shared_ptr<Work> VerifiedCollective::Barrier(const OpOptions& options) {
  OpDescriptor d;
  d.kind = static_cast<int32_t>(OpKind::kBarrier);
  return Verified(d, options, [&] { return inner_->Barrier(options); });
}

}  // namespace shardd::comm
