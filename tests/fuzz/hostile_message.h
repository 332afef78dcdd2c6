#ifndef SHARDD_TESTS_FUZZ_HOSTILE_MESSAGE_H_
#define SHARDD_TESTS_FUZZ_HOSTILE_MESSAGE_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace shardd::tests {

// Values a hostile request should sometimes carry because the server gives
// them meaning: real lease tokens, identities, rendezvous keys, the current
// epoch, ranks. Without them random requests rarely get past the first
// check.
struct HostileDictionary {
  std::vector<std::string> strings;
  std::vector<int64_t> integers;
};

struct HostileLimits {
  // Nesting of message fields (deeper ones stay unset).
  int max_depth = 4;
  // Elements of a repeated field, usually; now and then `many`.
  int max_repeated = 8;
  int many = 300;
  // Length of a string or bytes field, usually; now and then `huge`.
  int max_string = 256;
  int huge = 1 << 20;
};

// Builds hostile instances of any protobuf message type from its
// descriptor (and reflection): each field is left unset or set to an edge
// value (0, -1, the type's extremes, NaN and infinities, out-of-range enum
// numbers), a random one, or one from the dictionary; strings and bytes
// range from empty to `huge`; repeated and map fields from none to `many`
// elements; message fields recurse to max_depth. Strings stay valid UTF-8,
// so that every message serialises and parses: damaged bytes are Mangle's
// job.
//
// Deterministic for a seed. Not thread-safe (one per thread).
class HostileMessageFactory {
 public:
  HostileMessageFactory(uint64_t seed, HostileDictionary dictionary,
                        HostileLimits limits = {});

  // A new message of `type`, which must be in the generated pool.
  std::unique_ptr<google::protobuf::Message> Make(
      const google::protobuf::Descriptor* type);

  // A copy of `seed` (a request that passes the server's checks) with one
  // to three of its fields cleared or given a hostile value: requests that
  // get deep into a handler and fail, or not, on one field.
  std::unique_ptr<google::protobuf::Message> Mutate(
      const google::protobuf::Message& seed);

  // `bytes` damaged: truncated, with flipped bits, with garbage appended,
  // or replaced by garbage (possibly not a message at all).
  std::string Mangle(std::string bytes);

  // A uniformly random integer in [0, n).
  uint64_t Below(uint64_t n);

 private:
  void Fill(google::protobuf::Message* message, int depth);
  void AddOrSet(google::protobuf::Message* message,
                const google::protobuf::FieldDescriptor* field, int depth);
  int64_t Integer(int64_t min, int64_t max);
  uint64_t Unsigned(uint64_t max);
  double Real();
  std::string Text();
  std::string Bytes();
  int RepeatCount();

  std::mt19937_64 rng_;
  const HostileDictionary dictionary_;
  const HostileLimits limits_;
};

}  // namespace shardd::tests

#endif  // SHARDD_TESTS_FUZZ_HOSTILE_MESSAGE_H_
