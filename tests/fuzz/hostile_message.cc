#include "tests/fuzz/hostile_message.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>

#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"

namespace shardd::tests {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::MessageFactory;
using google::protobuf::Reflection;

// Odd but valid UTF-8 that servers put into paths, logs and keys.
const char* const kOddStrings[] = {
    "",
    " ",
    "/",
    "//",
    "../../../../etc/passwd",
    "%s%s%s%n",
    "\n\r\t",
    "unix:/tmp/x.sock",
    "127.0.0.1:0",
    "127.0.0.1:65536",
    "[::1]:1",
    "model/0",
    "model/-1",
    "gloo/0/epoch/1/shard/0/rank_0",
    "nccl/0/epoch/1/shard.0/id",
    "attacker/probe",
    "shard/0/0",
    "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",  // é € 😀
};

}  // namespace

HostileMessageFactory::HostileMessageFactory(uint64_t seed,
                                             HostileDictionary dictionary,
                                             HostileLimits limits)
    : rng_(seed), dictionary_(std::move(dictionary)), limits_(limits) {}

uint64_t HostileMessageFactory::Below(uint64_t n) {
  return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
}

int64_t HostileMessageFactory::Integer(int64_t min, int64_t max) {
  switch (Below(8)) {
    case 0:
      return 0;
    case 1:
      return -1;
    case 2:
      return min;
    case 3:
      return max;
    case 4:
      return static_cast<int64_t>(Below(12)) - 2;  // Small: ranks, steps.
    case 5:
      if (!dictionary_.integers.empty()) {
        const int64_t v =
            dictionary_.integers[Below(dictionary_.integers.size())];
        return std::clamp(v + static_cast<int64_t>(Below(3)) - 1, min, max);
      }
      [[fallthrough]];
    default:
      return std::uniform_int_distribution<int64_t>(min, max)(rng_);
  }
}

uint64_t HostileMessageFactory::Unsigned(uint64_t max) {
  switch (Below(5)) {
    case 0:
      return 0;
    case 1:
      return max;
    case 2:
      return Below(12);
    default:
      return std::uniform_int_distribution<uint64_t>(0, max)(rng_);
  }
}

double HostileMessageFactory::Real() {
  switch (Below(9)) {
    case 0:
      return 0.0;
    case 1:
      return -0.0;
    case 2:
      return std::numeric_limits<double>::quiet_NaN();
    case 3:
      return std::numeric_limits<double>::infinity();
    case 4:
      return -std::numeric_limits<double>::infinity();
    case 5:
      return std::numeric_limits<double>::max();
    case 6:
      return std::numeric_limits<double>::denorm_min();
    case 7:
      return -1.0;
    default:
      return std::uniform_real_distribution<double>(-1e6, 1e6)(rng_);
  }
}

std::string HostileMessageFactory::Text() {
  switch (Below(6)) {
    case 0:
      if (Below(10) == 0) return std::string("a\0b", 3);  // A NUL inside.
      return kOddStrings[Below(std::size(kOddStrings))];
    case 1:
    case 2:
      if (!dictionary_.strings.empty()) {
        std::string s = dictionary_.strings[Below(dictionary_.strings.size())];
        // Sometimes one character off: a near miss.
        if (!s.empty() && Below(4) == 0) {
          s[Below(s.size())] = static_cast<char>('a' + Below(26));
        }
        return s;
      }
      [[fallthrough]];
    case 3: {
      // Printable ASCII.
      std::string s(Below(limits_.max_string + 1), ' ');
      for (char& c : s) c = static_cast<char>(' ' + Below(95));
      return s;
    }
    case 4:
      if (Below(8) == 0) return std::string(limits_.huge, 'x');
      return std::string(Below(limits_.max_string * 16 + 1), 'k');
    default:
      return std::string();
  }
}

std::string HostileMessageFactory::Bytes() {
  if (Below(4) == 0) return Text();
  std::string s(
      Below(4) == 0 ? Below(limits_.huge + 1) : Below(limits_.max_string + 1),
      '\0');
  for (char& c : s) c = static_cast<char>(Below(256));
  return s;
}

int HostileMessageFactory::RepeatCount() {
  switch (Below(6)) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return Below(20) == 0 ? limits_.many : 2;
    default:
      return static_cast<int>(Below(limits_.max_repeated + 1));
  }
}

std::unique_ptr<Message> HostileMessageFactory::Make(const Descriptor* type) {
  const Message* prototype =
      MessageFactory::generated_factory()->GetPrototype(type);
  std::unique_ptr<Message> message(prototype->New());
  Fill(message.get(), 0);
  return message;
}

std::unique_ptr<Message> HostileMessageFactory::Mutate(const Message& seed) {
  std::unique_ptr<Message> message(seed.New());
  message->CopyFrom(seed);
  const Descriptor* type = message->GetDescriptor();
  if (type->field_count() == 0) return message;
  const Reflection* r = message->GetReflection();
  for (uint64_t n = 1 + Below(3); n > 0; --n) {
    const FieldDescriptor* field =
        type->field(static_cast<int>(Below(type->field_count())));
    r->ClearField(message.get(), field);
    if (Below(4) == 0) continue;  // Cleared only.
    const int count = field->is_repeated() ? RepeatCount() : 1;
    for (int k = 0; k < count; ++k) AddOrSet(message.get(), field, 0);
  }
  return message;
}

void HostileMessageFactory::Fill(Message* message, int depth) {
  const Descriptor* type = message->GetDescriptor();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    if (field->is_repeated()) {
      const int n =
          depth >= limits_.max_depth &&
                  field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE
              ? 0
              : RepeatCount();
      for (int k = 0; k < n; ++k) AddOrSet(message, field, depth);
    } else if (Below(4) != 0) {  // Three fields in four are set.
      AddOrSet(message, field, depth);
    }
  }
}

void HostileMessageFactory::AddOrSet(Message* message,
                                     const FieldDescriptor* field, int depth) {
  const Reflection* r = message->GetReflection();
  const bool add = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      const int32_t v =
          static_cast<int32_t>(Integer(std::numeric_limits<int32_t>::min(),
                                       std::numeric_limits<int32_t>::max()));
      add ? r->AddInt32(message, field, v) : r->SetInt32(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t v = Integer(std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max());
      add ? r->AddInt64(message, field, v) : r->SetInt64(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      const uint32_t v =
          static_cast<uint32_t>(Unsigned(std::numeric_limits<uint32_t>::max()));
      add ? r->AddUInt32(message, field, v) : r->SetUInt32(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t v = Unsigned(std::numeric_limits<uint64_t>::max());
      add ? r->AddUInt64(message, field, v) : r->SetUInt64(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const double v = Real();
      add ? r->AddDouble(message, field, v) : r->SetDouble(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const float v = static_cast<float>(Real());
      add ? r->AddFloat(message, field, v) : r->SetFloat(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const bool v = Below(2) == 1;
      add ? r->AddBool(message, field, v) : r->SetBool(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      // A declared value mostly; else a number no value has (proto3 enums
      // are open, so these travel as they are).
      int v = 0;
      const auto* e = field->enum_type();
      switch (Below(4)) {
        case 0:
          v = static_cast<int>(Below(2)) == 0 ? -1 : 9999;
          break;
        case 1:
          v = std::numeric_limits<int32_t>::min();
          break;
        default:
          v = e->value(static_cast<int>(Below(e->value_count())))->number();
      }
      add ? r->AddEnumValue(message, field, v)
          : r->SetEnumValue(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string v =
          field->type() == FieldDescriptor::TYPE_BYTES ? Bytes() : Text();
      add ? r->AddString(message, field, std::move(v))
          : r->SetString(message, field, std::move(v));
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      if (depth >= limits_.max_depth) break;
      Message* child = add ? r->AddMessage(message, field)
                           : r->MutableMessage(message, field);
      Fill(child, depth + 1);
      break;
    }
  }
}

std::string HostileMessageFactory::Mangle(std::string bytes) {
  switch (Below(4)) {
    case 0:
      if (!bytes.empty()) bytes.resize(Below(bytes.size()));
      return bytes;
    case 1:
      for (int i = 0, n = 1 + static_cast<int>(Below(8));
           i < n && !bytes.empty(); ++i) {
        bytes[Below(bytes.size())] ^= static_cast<char>(1 << Below(8));
      }
      return bytes;
    case 2:
      for (uint64_t i = 0, n = 1 + Below(64); i < n; ++i) {
        bytes.push_back(static_cast<char>(Below(256)));
      }
      return bytes;
    default: {
      std::string garbage(Below(512), '\0');
      for (char& c : garbage) c = static_cast<char>(Below(256));
      return garbage;
    }
  }
}

}  // namespace shardd::tests
