// Checks properties of the shardd.v1 API through the generated descriptor
// pool: the services' methods and streaming kinds, the enum and numbering
// conventions, a few load-bearing fields, and that every message round-trips
// through its wire format.

#include <grpcpp/grpcpp.h>

#include <cctype>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "shardd/v1/common.pb.h"
#include "shardd/v1/coordinator.grpc.pb.h"
#include "shardd/v1/peer.grpc.pb.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::v1 {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::Message;
using google::protobuf::MethodDescriptor;
using google::protobuf::Reflection;
using google::protobuf::ServiceDescriptor;

enum class Kind { kUnary, kServerStream, kClientStream, kBidi };

Kind KindOf(const MethodDescriptor& m) {
  if (m.client_streaming() && m.server_streaming()) return Kind::kBidi;
  if (m.client_streaming()) return Kind::kClientStream;
  if (m.server_streaming()) return Kind::kServerStream;
  return Kind::kUnary;
}

// "ShardingStrategy" -> "SHARDING_STRATEGY", "DType" -> "DTYPE".
std::string UpperSnake(absl::string_view camel) {
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    const char c = camel[i];
    if (i > 0 && std::isupper(static_cast<unsigned char>(c)) &&
        std::islower(static_cast<unsigned char>(camel[i - 1]))) {
      out += '_';
    }
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Referencing one generated type per file links it into the pool.
    files_ = {
        DType_descriptor()->file(),
        RegisterModelRequest::descriptor()->file(),
        FetchShardRequest::descriptor()->file(),
        JoinRequest::descriptor()->file(),
    };
  }

  static const google::protobuf::DescriptorPool* Pool() {
    return google::protobuf::DescriptorPool::generated_pool();
  }

  const Descriptor* Msg(absl::string_view name) {
    const Descriptor* d =
        Pool()->FindMessageTypeByName(absl::StrCat("shardd.v1.", name));
    EXPECT_NE(d, nullptr) << name;
    return d;
  }

  // Every message type of the API, nested ones included.
  std::vector<const Descriptor*> AllMessages() const {
    std::vector<const Descriptor*> out;
    std::vector<const Descriptor*> todo;
    for (const FileDescriptor* f : files_) {
      for (int i = 0; i < f->message_type_count(); ++i) {
        todo.push_back(f->message_type(i));
      }
    }
    while (!todo.empty()) {
      const Descriptor* d = todo.back();
      todo.pop_back();
      if (d->options().map_entry()) continue;
      out.push_back(d);
      for (int i = 0; i < d->nested_type_count(); ++i) {
        todo.push_back(d->nested_type(i));
      }
    }
    return out;
  }

  std::vector<const EnumDescriptor*> AllEnums() const {
    std::vector<const EnumDescriptor*> out;
    for (const FileDescriptor* f : files_) {
      for (int i = 0; i < f->enum_type_count(); ++i) {
        out.push_back(f->enum_type(i));
      }
    }
    for (const Descriptor* d : AllMessages()) {
      for (int i = 0; i < d->enum_type_count(); ++i) {
        out.push_back(d->enum_type(i));
      }
    }
    return out;
  }

  void ExpectService(absl::string_view name,
                     const std::map<std::string, Kind>& expected) {
    const ServiceDescriptor* s =
        Pool()->FindServiceByName(absl::StrCat("shardd.v1.", name));
    ASSERT_NE(s, nullptr) << name;
    std::map<std::string, Kind> actual;
    for (int i = 0; i < s->method_count(); ++i) {
      const MethodDescriptor* m = s->method(i);
      actual[m->name()] = KindOf(*m);
      EXPECT_EQ(m->input_type()->file()->package(), "shardd.v1") << m->name();
      EXPECT_EQ(m->output_type()->file()->package(), "shardd.v1") << m->name();
    }
    EXPECT_EQ(actual, expected) << "service " << name;
  }

  void ExpectField(absl::string_view message, absl::string_view field,
                   FieldDescriptor::Type type, bool repeated = false) {
    const Descriptor* d = Msg(message);
    ASSERT_NE(d, nullptr);
    const FieldDescriptor* f = d->FindFieldByName(std::string(field));
    ASSERT_NE(f, nullptr) << message << "." << field;
    EXPECT_EQ(f->type(), type) << message << "." << field;
    EXPECT_EQ(f->is_repeated(), repeated) << message << "." << field;
  }

  std::vector<const FileDescriptor*> files_;
};

TEST_F(ApiTest, FilesArePackageShardV1Proto3WithSharedCommon) {
  const std::set<std::string> names = {
      "shardd/v1/common.proto", "shardd/v1/trainer.proto",
      "shardd/v1/peer.proto", "shardd/v1/coordinator.proto"};
  std::set<std::string> seen;
  for (const FileDescriptor* f : files_) {
    seen.insert(f->name());
    EXPECT_EQ(f->package(), "shardd.v1") << f->name();
    EXPECT_EQ(f->syntax(), FileDescriptor::SYNTAX_PROTO3) << f->name();
    if (f->name() == "shardd/v1/common.proto") {
      EXPECT_EQ(f->dependency_count(), 0);
      EXPECT_EQ(f->service_count(), 0);
    } else {
      ASSERT_EQ(f->dependency_count(), 1) << f->name();
      EXPECT_EQ(f->dependency(0)->name(), "shardd/v1/common.proto");
      EXPECT_EQ(f->service_count(), 1) << f->name();
    }
  }
  EXPECT_EQ(seen, names);
}

TEST_F(ApiTest, TrainerServiceHasItsMethods) {
  ExpectService("Trainer", {{"RegisterModel", Kind::kUnary},
                            {"Gather", Kind::kUnary},
                            {"Release", Kind::kUnary},
                            {"ReduceGrad", Kind::kUnary},
                            {"Step", Kind::kUnary},
                            {"WaitReady", Kind::kUnary},
                            {"ExportState", Kind::kUnary},
                            {"GetStatus", Kind::kUnary},
                            {"CheckMemory", Kind::kUnary},
                            {"WatchEvents", Kind::kServerStream}});
}

TEST_F(ApiTest, PeerServiceHasItsMethods) {
  ExpectService("Peer",
                {{"FetchShard", Kind::kServerStream}, {"Probe", Kind::kUnary}});
}

TEST_F(ApiTest, CoordinatorServiceHasItsMethods) {
  ExpectService("Coordinator", {{"Join", Kind::kUnary},
                                {"Heartbeat", Kind::kUnary},
                                {"Leave", Kind::kUnary},
                                {"WatchMembership", Kind::kServerStream},
                                {"ReportFailure", Kind::kUnary},
                                {"ShouldCommit", Kind::kUnary},
                                {"RendezvousSet", Kind::kUnary},
                                {"RendezvousGet", Kind::kUnary},
                                {"RendezvousWait", Kind::kUnary},
                                {"GetClusterState", Kind::kUnary}});
}

TEST_F(ApiTest, GeneratedStubsUseTheFullMethodNames) {
  const MethodDescriptor* step =
      Pool()->FindMethodByName("shardd.v1.Trainer.Step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->input_type(), StepRequest::descriptor());
  EXPECT_EQ(step->output_type(), StepResponse::descriptor());
  EXPECT_EQ(std::string(Trainer::service_full_name()), "shardd.v1.Trainer");
  EXPECT_EQ(std::string(Peer::service_full_name()), "shardd.v1.Peer");
  EXPECT_EQ(std::string(Coordinator::service_full_name()),
            "shardd.v1.Coordinator");
}

TEST_F(ApiTest, EveryEnumStartsWithUnspecifiedAndPrefixesItsValues) {
  const std::vector<const EnumDescriptor*> enums = AllEnums();
  EXPECT_GE(enums.size(), 15u);
  for (const EnumDescriptor* e : enums) {
    const std::string prefix = UpperSnake(e->name()) + "_";
    const auto* zero = e->FindValueByNumber(0);
    ASSERT_NE(zero, nullptr) << e->full_name();
    EXPECT_EQ(zero->name(), prefix + "UNSPECIFIED") << e->full_name();
    EXPECT_EQ(e->value(0)->number(), 0) << e->full_name();
    std::set<int> numbers;
    for (int i = 0; i < e->value_count(); ++i) {
      const auto* v = e->value(i);
      EXPECT_EQ(v->name().rfind(prefix, 0), 0u) << v->full_name();
      EXPECT_TRUE(numbers.insert(v->number()).second) << v->full_name();
      EXPECT_EQ(v->number(), i) << v->full_name() << ": values are 0..n-1";
    }
  }
}

TEST_F(ApiTest, FieldNumbersAreOneToNWithoutGaps) {
  for (const Descriptor* d : AllMessages()) {
    std::set<int> numbers;
    for (int i = 0; i < d->field_count(); ++i) {
      numbers.insert(d->field(i)->number());
    }
    int expected = 1;
    for (int n : numbers) {
      EXPECT_EQ(n, expected) << d->full_name();
      expected = n + 1;
    }
    EXPECT_EQ(d->reserved_range_count(), 0) << d->full_name();
  }
}

TEST_F(ApiTest, LoadBearingFieldsHaveTheirTypes) {
  using T = FieldDescriptor;
  // Trainer.
  ExpectField("GatherRequest", "unit", T::TYPE_INT32);
  ExpectField("RegisterModelRequest", "load_from", T::TYPE_STRING);
  ExpectField("RegisterModelRequest", "resume_from", T::TYPE_STRING);
  ExpectField("FileInit", "path", T::TYPE_STRING);
  ExpectField("GatherRequest", "prefetch", T::TYPE_INT32, /*repeated=*/true);
  ExpectField("GatherRequest", "pass", T::TYPE_ENUM);
  ExpectField("GatherResponse", "params", T::TYPE_MESSAGE);
  ExpectField("ReduceGradRequest", "grad", T::TYPE_MESSAGE);
  ExpectField("ReduceGradRequest", "accumulate_only", T::TYPE_BOOL);
  ExpectField("StepRequest", "step", T::TYPE_INT64);
  ExpectField("StepResponse", "committed_step", T::TYPE_INT64);
  ExpectField("StepResponse", "grad_norm", T::TYPE_DOUBLE);
  ExpectField("StepResponse", "clip_scale", T::TYPE_DOUBLE);
  ExpectField("RegisterModelResponse", "committed_step", T::TYPE_INT64);
  ExpectField("RegisterModelResponse", "reattached", T::TYPE_BOOL);
  ExpectField("GetStatusResponse", "memory", T::TYPE_MESSAGE);
  ExpectField("GetStatusResponse", "collectives", T::TYPE_MESSAGE,
              /*repeated=*/true);
  ExpectField("ShardingConfig", "max_gathered_units", T::TYPE_INT32);
  ExpectField("ShardingConfig", "max_grad_norm", T::TYPE_DOUBLE);
  ExpectField("TensorSpec", "shape", T::TYPE_INT64, /*repeated=*/true);
  for (const char* field :
       {"parameter_shard_bytes", "low_precision_parameter_bytes",
        "gradient_shard_bytes", "optimizer_state_bytes",
        "gathered_parameter_bytes", "unsharded_gradient_bytes", "padding_bytes",
        "peak_parameter_bytes", "total_bytes"}) {
    ExpectField("MemoryBreakdown", field, T::TYPE_INT64);
  }
  // Peer.
  ExpectField("ShardChunk", "data", T::TYPE_BYTES);
  ExpectField("ShardChunk", "crc32c", T::TYPE_FIXED32);
  ExpectField("ShardTrailer", "crc32c", T::TYPE_FIXED32);
  ExpectField("ShardHeader", "step", T::TYPE_INT64);
  // Coordinator.
  ExpectField("JoinRequest", "identity", T::TYPE_STRING);
  ExpectField("JoinResponse", "lease_token", T::TYPE_STRING);
  ExpectField("JoinResponse", "lease_ms", T::TYPE_INT64);
  ExpectField("HeartbeatRequest", "lease_token", T::TYPE_STRING);
  ExpectField("RendezvousWaitRequest", "keys", T::TYPE_STRING,
              /*repeated=*/true);
  ExpectField("ClusterState", "decisions", T::TYPE_MESSAGE,
              /*repeated=*/true);
  // Every epoch-scoped request names its epoch.
  for (const char* message :
       {"FetchShardRequest", "HeartbeatRequest", "ReportFailureRequest",
        "ShouldCommitRequest", "RendezvousSetRequest", "RendezvousGetRequest",
        "RendezvousWaitRequest"}) {
    ExpectField(message, "epoch", T::TYPE_INT64);
  }
}

TEST_F(ApiTest, EveryCallAMemberMakesAsItsRankCarriesItsLeaseToken) {
  using T = FieldDescriptor;
  for (const char* message :
       {"HeartbeatRequest", "LeaveRequest", "ReportFailureRequest",
        "ShouldCommitRequest", "RendezvousSetRequest", "RendezvousGetRequest",
        "RendezvousWaitRequest"}) {
    ExpectField(message, "lease_token", T::TYPE_STRING);
  }
  ExpectField("JoinRequest", "join_secret", T::TYPE_STRING);
}

TEST_F(ApiTest, NoReplyButJoinsCarriesALeaseTokenOrSecret) {
  // Every message reachable from a response of any RPC (other than Join's
  // own reply to its caller): none may hold a field that could carry
  // another member's credential.
  std::vector<const Descriptor*> todo;
  for (const FileDescriptor* f : files_) {
    for (int s = 0; s < f->service_count(); ++s) {
      for (int m = 0; m < f->service(s)->method_count(); ++m) {
        const Descriptor* out = f->service(s)->method(m)->output_type();
        if (out->name() != "JoinResponse") todo.push_back(out);
      }
    }
  }
  std::set<const Descriptor*> seen;
  while (!todo.empty()) {
    const Descriptor* d = todo.back();
    todo.pop_back();
    if (!seen.insert(d).second) continue;
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      EXPECT_EQ(f->name().find("token"), std::string::npos) << f->full_name();
      EXPECT_EQ(f->name().find("secret"), std::string::npos) << f->full_name();
      if (f->message_type() != nullptr) todo.push_back(f->message_type());
    }
  }
  EXPECT_GT(seen.size(), 20u);
}

TEST_F(ApiTest, OptionalFieldsTrackPresence) {
  // JoinRequest.rank: unset means "any slot", distinct from rank 0.
  const FieldDescriptor* rank = Msg("JoinRequest")->FindFieldByName("rank");
  ASSERT_NE(rank, nullptr);
  EXPECT_TRUE(rank->has_optional_keyword());
  JoinRequest join;
  EXPECT_FALSE(join.has_rank());
  join.set_rank(0);
  EXPECT_TRUE(join.has_rank());

  const FieldDescriptor* lr =
      Msg("StepRequest")->FindFieldByName("learning_rate");
  ASSERT_NE(lr, nullptr);
  EXPECT_TRUE(lr->has_optional_keyword());
}

TEST_F(ApiTest, OneofsHaveTheirAlternatives) {
  const std::map<std::string, std::pair<std::string, std::set<std::string>>>
      expected = {
          {"DataRef",
           {"location", {"shared_memory", "cuda_ipc", "inline_data"}}},
          {"OptimizerConfig", {"kind", {"adamw", "sgd"}}},
          {"TensorInit",
           {"kind",
            {"zeros", "constant", "normal", "values", "shared_memory",
             "uniform", "file", "cuda_ipc"}}},
          {"FetchShardResponse", {"item", {"header", "chunk", "trailer"}}},
      };
  for (const auto& [message, oneof] : expected) {
    const Descriptor* d = Msg(message);
    ASSERT_NE(d, nullptr);
    const auto* o = d->FindOneofByName(oneof.first);
    ASSERT_NE(o, nullptr) << message << "." << oneof.first;
    std::set<std::string> fields;
    for (int i = 0; i < o->field_count(); ++i) {
      fields.insert(o->field(i)->name());
    }
    EXPECT_EQ(fields, oneof.second) << message;
  }
}

// Fills every field of `m` (recursing into messages up to `depth`), so that a
// round trip exercises every field's wire encoding. One member of each oneof
// ends up set (the last one filled).
void Fill(Message* m, int depth, int seed) {
  const Descriptor* d = m->GetDescriptor();
  const Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const int v = seed + f->number();
    const int copies = f->is_repeated() ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          f->is_repeated() ? r->AddInt32(m, f, -v - c) : r->SetInt32(m, f, -v);
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(m, f, (int64_t{1} << 40) + v + c)
                           : r->SetInt64(m, f, (int64_t{1} << 40) + v);
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          f->is_repeated() ? r->AddUInt32(m, f, 0xfffffff0u + c)
                           : r->SetUInt32(m, f, 0xfffffff0u + v % 8);
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          f->is_repeated() ? r->AddUInt64(m, f, ~uint64_t{0} - c)
                           : r->SetUInt64(m, f, ~uint64_t{0} - v);
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          f->is_repeated() ? r->AddDouble(m, f, 0.25 * v + c)
                           : r->SetDouble(m, f, 0.25 * v);
          break;
        case FieldDescriptor::CPPTYPE_FLOAT:
          f->is_repeated() ? r->AddFloat(m, f, 0.5f * v + c)
                           : r->SetFloat(m, f, 0.5f * v);
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          f->is_repeated() ? r->AddBool(m, f, true) : r->SetBool(m, f, true);
          break;
        case FieldDescriptor::CPPTYPE_ENUM: {
          const EnumDescriptor* e = f->enum_type();
          const auto* value = e->value(e->value_count() - 1);
          f->is_repeated() ? r->AddEnum(m, f, value) : r->SetEnum(m, f, value);
          break;
        }
        case FieldDescriptor::CPPTYPE_STRING: {
          std::string s = absl::StrCat(f->name(), "-", v, "-", c);
          if (f->type() == FieldDescriptor::TYPE_BYTES)
            s += std::string("\0\xff", 2);
          f->is_repeated() ? r->AddString(m, f, s) : r->SetString(m, f, s);
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          if (f->is_map()) {
            Message* entry = r->AddMessage(m, f);
            Fill(entry, depth, v + c);
          } else if (depth > 0) {
            Message* sub = f->is_repeated() ? r->AddMessage(m, f)
                                            : r->MutableMessage(m, f);
            Fill(sub, depth - 1, v + c);
          }
          break;
      }
    }
  }
}

TEST_F(ApiTest, EveryMessageRoundTripsThroughTheWireFormat) {
  const std::vector<const Descriptor*> messages = AllMessages();
  EXPECT_GE(messages.size(), 60u);
  for (const Descriptor* d : messages) {
    const Message* prototype =
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(d);
    ASSERT_NE(prototype, nullptr) << d->full_name();
    std::unique_ptr<Message> original(prototype->New());
    Fill(original.get(), /*depth=*/3, /*seed=*/7);
    std::string wire;
    ASSERT_TRUE(original->SerializeToString(&wire)) << d->full_name();
    if (d->field_count() > 0) {
      EXPECT_FALSE(wire.empty()) << d->full_name();
    }
    std::unique_ptr<Message> parsed(prototype->New());
    ASSERT_TRUE(parsed->ParseFromString(wire)) << d->full_name();
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(*original, *parsed))
        << d->full_name() << "\noriginal: " << original->DebugString()
        << "\nparsed: " << parsed->DebugString();
  }
}

TEST_F(ApiTest, AStubReportsUnavailableWithoutAServer) {
  auto channel = grpc::CreateChannel("unix:/nonexistent/shardd.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = Trainer::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  GetStatusRequest request;
  GetStatusResponse response;
  const grpc::Status status = stub->GetStatus(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
}

}  // namespace
}  // namespace shardd::v1
