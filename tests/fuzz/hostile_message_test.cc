#include "tests/fuzz/hostile_message.h"

#include <memory>
#include <string>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.pb.h"
#include "shardd/v1/peer.pb.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::tests {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// Every message type of the shardd.v1 API.
std::vector<const Descriptor*> ApiMessages() {
  // Referencing a type links its file into the generated pool.
  const FileDescriptor* files[] = {
      v1::JoinRequest::descriptor()->file(),
      v1::FetchShardRequest::descriptor()->file(),
      v1::RegisterModelRequest::descriptor()->file(),
  };
  std::vector<const Descriptor*> out;
  for (const FileDescriptor* f : files) {
    for (int i = 0; i < f->message_type_count(); ++i) {
      out.push_back(f->message_type(i));
    }
  }
  return out;
}

HostileDictionary Dictionary() {
  return {{"token-1", "node-0", "model/0"}, {3, 7}};
}

TEST(HostileMessageTest, EveryApiMessageSerialisesAndParsesBack) {
  HostileLimits limits;
  limits.huge = 4096;  // Keep the test quick.
  HostileMessageFactory factory(1, Dictionary(), limits);
  const std::vector<const Descriptor*> types = ApiMessages();
  ASSERT_GT(types.size(), 30u);
  int non_empty = 0;
  for (const Descriptor* type : types) {
    for (int i = 0; i < 20; ++i) {
      std::unique_ptr<google::protobuf::Message> m = factory.Make(type);
      std::string bytes;
      ASSERT_TRUE(m->SerializeToString(&bytes)) << type->full_name();
      non_empty += !bytes.empty();
      std::unique_ptr<google::protobuf::Message> back(m->New());
      // (Not compared field by field: a map with a key twice keeps one.)
      ASSERT_TRUE(back->ParseFromString(bytes)) << type->full_name();
    }
  }
  EXPECT_GT(non_empty, static_cast<int>(types.size()) * 10);
}

TEST(HostileMessageTest, TheSameSeedMakesTheSameRequests) {
  HostileMessageFactory a(42, Dictionary()), b(42, Dictionary()),
      c(43, Dictionary());
  std::string from_a, from_b, from_c;
  for (int i = 0; i < 50; ++i) {
    from_a +=
        a.Make(v1::RendezvousSetRequest::descriptor())->SerializeAsString();
    from_b +=
        b.Make(v1::RendezvousSetRequest::descriptor())->SerializeAsString();
    from_c +=
        c.Make(v1::RendezvousSetRequest::descriptor())->SerializeAsString();
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_NE(from_a, from_c);
}

TEST(HostileMessageTest, RequestsReachEdgeValuesAndTheDictionary) {
  HostileMessageFactory factory(7, Dictionary());
  bool negative_rank = false, extreme_epoch = false, token = false,
       bad_enum = false;
  for (int i = 0; i < 500; ++i) {
    v1::HeartbeatRequest hb;
    hb.CopyFrom(*factory.Make(v1::HeartbeatRequest::descriptor()));
    negative_rank |= hb.rank() < 0;
    extreme_epoch |= hb.epoch() == std::numeric_limits<int64_t>::max();
    token |= hb.lease_token() == "token-1";
    bad_enum |= !v1::MemberState_IsValid(hb.state());
  }
  EXPECT_TRUE(negative_rank);
  EXPECT_TRUE(extreme_epoch);
  EXPECT_TRUE(token);
  EXPECT_TRUE(bad_enum);
}

TEST(HostileMessageTest, MutationsKeepMostOfTheSeed) {
  HostileMessageFactory factory(11, Dictionary());
  v1::RendezvousSetRequest seed;
  seed.set_epoch(5);
  seed.set_key("model/0");
  seed.set_value("spec");
  seed.set_lease_token("token-1");
  int unchanged_fields = 0, changed = 0;
  for (int i = 0; i < 200; ++i) {
    v1::RendezvousSetRequest m;
    m.CopyFrom(*factory.Mutate(seed));
    unchanged_fields += (m.epoch() == 5) + (m.key() == "model/0") +
                        (m.value() == "spec") + (m.lease_token() == "token-1");
    changed += m.SerializeAsString() != seed.SerializeAsString();
  }
  // At most three of six fields change per mutation.
  EXPECT_GT(unchanged_fields, 200);
  EXPECT_GT(changed, 150);
}

TEST(HostileMessageTest, MangledBytesAreSometimesNoMessageAtAll) {
  HostileMessageFactory factory(9, Dictionary());
  const std::string good =
      factory.Make(v1::JoinRequest::descriptor())->SerializeAsString();
  int unparseable = 0;
  for (int i = 0; i < 200; ++i) {
    v1::JoinRequest parsed;
    unparseable += !parsed.ParseFromString(factory.Mangle(good));
  }
  EXPECT_GT(unparseable, 0);
}

}  // namespace
}  // namespace shardd::tests
