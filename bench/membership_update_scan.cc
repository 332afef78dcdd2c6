#include "bench/membership_update_scan.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace shardd::bench {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// MembershipUpdate and MemberInfo field numbers (proto/shardd/v1).
constexpr int kEpoch = 1;
constexpr int kMembers = 2;
constexpr int kReady = 3;
constexpr int kWorldSize = 5;
constexpr int kKeepalive = 9;
constexpr int kJobState = 10;
constexpr int kPlan = 12;
constexpr int kDelta = 13;
constexpr int kRemovedRanks = 14;
constexpr int kLiveMembers = 15;
constexpr int kMemberRank = 1;

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed MembershipUpdate: ", what));
}

// The rank of the MemberInfo of `length` bytes at the stream's position,
// which is left after it.
absl::StatusOr<int32_t> ScanMemberRank(CodedInputStream& in, uint32_t length) {
  const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
  int32_t rank = 0;  // proto3: an absent rank is 0.
  const uint32_t tag = in.ReadTag();
  if (tag != 0) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kMemberRank &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_VARINT) {
      uint32_t value = 0;
      if (!in.ReadVarint32(&value)) return Malformed("member rank");
      rank = static_cast<int32_t>(value);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return Malformed("member field");
    }
  }
  // The rest of the member: one skip over the remaining bytes.
  if (!in.Skip(in.BytesUntilLimit())) return Malformed("member");
  in.PopLimit(limit);
  return rank;
}

absl::StatusOr<ScannedUpdate> ScanStream(CodedInputStream& in, size_t bytes) {
  ScannedUpdate out;
  out.bytes = bytes;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    uint64_t value = 0;
    if (wire == WireFormatLite::WIRETYPE_VARINT &&
        (field == kEpoch || field == kReady || field == kWorldSize ||
         field == kKeepalive || field == kJobState || field == kDelta ||
         field == kRemovedRanks || field == kLiveMembers)) {
      if (!in.ReadVarint64(&value)) return Malformed("varint");
      switch (field) {
        case kEpoch:
          out.epoch = static_cast<int64_t>(value);
          break;
        case kReady:
          out.ready = value != 0;
          break;
        case kWorldSize:
          out.world_size = static_cast<int32_t>(value);
          break;
        case kKeepalive:
          out.keepalive = value != 0;
          break;
        case kJobState:
          out.job_failed = value == shardd::v1::JOB_STATE_FAILED;
          break;
        case kDelta:
          out.delta = value != 0;
          break;
        case kRemovedRanks:
          out.removed_ranks.push_back(static_cast<int32_t>(value));
          break;
        case kLiveMembers:
          out.live_members = static_cast<int32_t>(value);
          break;
      }
      continue;
    }
    if (wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        field == kRemovedRanks) {
      // Packed (proto3's default for repeated scalars).
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return Malformed("length");
      const CodedInputStream::Limit limit =
          in.PushLimit(static_cast<int>(length));
      while (in.BytesUntilLimit() > 0) {
        uint32_t value = 0;
        if (!in.ReadVarint32(&value)) return Malformed("removed rank");
        out.removed_ranks.push_back(static_cast<int32_t>(value));
      }
      in.PopLimit(limit);
      continue;
    }
    if (wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        (field == kMembers || field == kPlan)) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return Malformed("length");
      if (field == kMembers) {
        absl::StatusOr<int32_t> rank = ScanMemberRank(in, length);
        if (!rank.ok()) return rank.status();
        out.ranks.push_back(*rank);
      } else {
        std::string plan;
        if (!in.ReadString(&plan, static_cast<int>(length)) ||
            !out.plan.ParseFromString(plan)) {
          return Malformed("plan");
        }
      }
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return Malformed("field");
  }
  if (!in.ConsumedEntireMessage()) return Malformed("trailing bytes");
  return out;
}

}  // namespace

absl::StatusOr<ScannedUpdate> MembershipUpdateScan::Scan(
    const grpc::ByteBuffer& buffer) {
  // ProtoBufferReader needs a mutable buffer; copying a ByteBuffer only
  // takes references to its slices.
  grpc::ByteBuffer copy(buffer);
  grpc::ProtoBufferReader reader(&copy);
  CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT32_MAX);
  return ScanStream(in, buffer.Length());
}

absl::StatusOr<ScannedUpdate> MembershipUpdateScan::Scan(
    const std::string& bytes) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(INT32_MAX);
  return ScanStream(in, bytes.size());
}

}  // namespace shardd::bench
