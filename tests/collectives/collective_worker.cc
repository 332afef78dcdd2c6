// collective_worker: one rank of a multi-process collectives test.
//
// Joins a GlooCollective (or, with --transport=shm, a shared-memory
// ShmCollective) through a FileStore directory and runs one scenario, then
// prints a machine-readable line
//   RESULT scenario=NAME rank=R key=value ...
// on stdout and exits 0; any failure prints "ERROR: ..." on stderr and exits
// non-zero. The drivers (correctness_test, fault_test) spawn W of these.
//
// Scenarios:
//   correctness  every operation over --sizes (and --fp32_sizes for fp32
//                only) and --dtypes, even and uneven counts (zeros
//                included), sum and average, in-place all-gather, broadcast
//                from varying (non-zero) roots, a send/recv ring, barrier,
//                a pipelined burst of async all-gathers, Stats() totals, and
//                INVALID_ARGUMENT that does not poison the communicator.
//                Inputs are a function of (seed, rank, index), so every rank
//                computes the whole reference itself. Gather, broadcast and
//                send/recv move random bit patterns (NaNs included) and are
//                compared bit for bit; reductions use small multiples of
//                1/8 whose fp32 sums are exact in any order, so the result
//                is compared bit for bit with "convert to fp32, sum, divide
//                by W for the average, round once".
//   determinism  all-reduce and reduce-scatter of random (non-exact)
//                inputs; prints a hash of every output (hash) and of the
//                all-reduce outputs alone (allreduce_hash, equal on every
//                rank) for the driver to compare across runs; checks each
//                value against a double-precision reference within the
//                rounding bound.
//   fault        --op (allgather, reducescatter, allreduce, broadcast,
//                barrier, sendrecv) over --fault_bytes; rank --victim raises
//                --signal (kill or stop) on itself as soon as its own
//                Stats() shows the operation running (barrier: right before
//                entering it, since a barrier has no data to be in the
//                middle of). Survivors report the status of their operation
//                and the time from issuing it to the error, check that a
//                later operation fails too, abort, destroy the communicator,
//                count threads, then form the epoch+1 communicator
//                (--epoch2=shrink: the W-1 survivors renumbered; replace: the
//                survivors keep their ranks and a `join` worker takes the
//                victim's) and all-reduce on it.
//   join         a replacement rank: only the epoch+1 part of `fault`.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/file_store.h"
#include "daemon/comm/gloo_collective.h"
#include "daemon/comm/host_collective.h"
#include "daemon/comm/host_transport.h"
#include "daemon/core/dtype.h"
#include "tests/collectives/process_group.h"

namespace shardd::comm {
namespace {

using core::DType;

// ---------------------------------------------------------------- flags ---

struct Flags {
  int rank = -1;
  int size = -1;
  std::string store;
  int64_t epoch = 1;
  std::string group = "world";
  std::string scenario;
  std::vector<std::string> sizes;
  std::vector<std::string> fp32_sizes;
  std::vector<DType> dtypes = {DType::kFloat32, DType::kBFloat16,
                               DType::kFloat16};
  uint64_t seed = 1;
  int64_t op_timeout_ms = 60000;
  int64_t connect_timeout_ms = 60000;
  std::string op;
  int victim = 1;
  std::string signal = "kill";
  int64_t fault_bytes = int64_t{64} << 20;
  std::string epoch2 = "shrink";
  // "gloo" (GlooCollective over TCP) or "shm" (CreateHostCollective with
  // the shared-memory transport required).
  std::string transport = "gloo";
};

[[noreturn]] void Fail(absl::string_view message, int code = 1) {
  std::cerr << "ERROR: " << message << std::endl;
  std::exit(code);
}

void Check(const absl::Status& status, absl::string_view what) {
  if (!status.ok()) Fail(absl::StrCat(what, ": ", status.ToString()));
}

int64_t ParseInt(absl::string_view name, absl::string_view value) {
  int64_t out = 0;
  if (!absl::SimpleAtoi(value, &out)) {
    Fail(absl::StrCat("--", name, ": not an integer: ", value), 2);
  }
  return out;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg.substr(0, 2) != "--") Fail(absl::StrCat("bad argument ", arg), 2);
    arg.remove_prefix(2);
    const size_t eq = arg.find('=');
    if (eq == absl::string_view::npos) {
      Fail(absl::StrCat("expected --name=value: ", arg), 2);
    }
    const absl::string_view name = arg.substr(0, eq);
    const absl::string_view value = arg.substr(eq + 1);
    auto list = [&] {
      return std::vector<std::string>(
          absl::StrSplit(value, ',', absl::SkipEmpty()));
    };
    if (name == "rank") {
      f.rank = static_cast<int>(ParseInt(name, value));
    } else if (name == "size") {
      f.size = static_cast<int>(ParseInt(name, value));
    } else if (name == "store") {
      f.store = std::string(value);
    } else if (name == "epoch") {
      f.epoch = ParseInt(name, value);
    } else if (name == "group") {
      f.group = std::string(value);
    } else if (name == "scenario") {
      f.scenario = std::string(value);
    } else if (name == "sizes") {
      f.sizes = list();
    } else if (name == "fp32_sizes") {
      f.fp32_sizes = list();
    } else if (name == "dtypes") {
      f.dtypes.clear();
      for (const std::string& d : list()) {
        absl::StatusOr<DType> dtype = core::ParseDType(d);
        if (!dtype.ok()) Fail(dtype.status().ToString(), 2);
        f.dtypes.push_back(*dtype);
      }
    } else if (name == "seed") {
      f.seed = static_cast<uint64_t>(ParseInt(name, value));
    } else if (name == "op_timeout_ms") {
      f.op_timeout_ms = ParseInt(name, value);
    } else if (name == "connect_timeout_ms") {
      f.connect_timeout_ms = ParseInt(name, value);
    } else if (name == "op") {
      f.op = std::string(value);
    } else if (name == "victim") {
      f.victim = static_cast<int>(ParseInt(name, value));
    } else if (name == "signal") {
      f.signal = std::string(value);
    } else if (name == "fault_bytes") {
      f.fault_bytes = ParseInt(name, value);
    } else if (name == "epoch2") {
      f.epoch2 = std::string(value);
    } else if (name == "transport") {
      f.transport = std::string(value);
      if (f.transport != "gloo" && f.transport != "shm") {
        Fail("--transport must be gloo or shm", 2);
      }
    } else {
      Fail(absl::StrCat("unknown flag --", name), 2);
    }
  }
  if (f.size < 1 || f.rank < 0 || f.rank >= f.size) {
    Fail("--rank and --size are required (0 <= rank < size)", 2);
  }
  if (f.store.empty()) Fail("--store is required", 2);
  return f;
}

// Sizes: "N" elements, or "NKiB"/"NMiB" bytes (elements = bytes / dtype).
int64_t Elements(absl::string_view spec, DType dtype) {
  int64_t unit = 0;
  absl::string_view digits = spec;
  if (absl::EndsWith(spec, "MiB")) {
    unit = int64_t{1} << 20;
    digits.remove_suffix(3);
  } else if (absl::EndsWith(spec, "KiB")) {
    unit = int64_t{1} << 10;
    digits.remove_suffix(3);
  }
  const int64_t n = ParseInt("sizes", digits);
  return unit == 0 ? n : n * unit / core::DTypeSize(dtype);
}

// ----------------------------------------------------------- patterns ---

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t seed, uint64_t salt, int rank, int64_t index) {
  return Mix(Mix(Mix(seed ^ (salt << 32)) ^ static_cast<uint64_t>(rank)) ^
             static_cast<uint64_t>(index));
}

float ToFloat(const uint8_t* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return core::BFloat16ToFloat(h);
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return core::HalfToFloat(h);
    }
  }
  return 0;
}

void FromFloat(float f, DType dtype, uint8_t* p) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(p, &f, 4);
      return;
    case DType::kBFloat16: {
      const uint16_t h = core::FloatToBFloat16(f);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kFloat16: {
      const uint16_t h = core::FloatToHalf(f);
      std::memcpy(p, &h, 2);
      return;
    }
  }
}

// Values whose fp32 sums over <= 8 ranks are exact in any order and exactly
// representable in bf16 and fp16: multiples of 1/8 in [-2, 2].
float ExactValue(uint64_t seed, uint64_t salt, int rank, int64_t index) {
  return static_cast<float>(
             static_cast<int>(Hash(seed, salt, rank, index) % 33) - 16) *
         0.125f;
}

// Random values in [-1, 1): sums depend on the summation order.
float RandomValue(uint64_t seed, uint64_t salt, int rank, int64_t index) {
  return static_cast<float>(
      static_cast<double>(Hash(seed, salt, rank, index) >> 11) * 0x1.0p-52 -
      1.0);
}

enum class Pattern { kBits, kExact, kRandom };

// Element `index` of rank `rank`'s input for (seed, salt), written to p.
void Value(Pattern pattern, uint64_t seed, uint64_t salt, int rank,
           int64_t index, DType dtype, uint8_t* p) {
  switch (pattern) {
    case Pattern::kBits: {
      const uint64_t h = Hash(seed, salt, rank, index);
      std::memcpy(p, &h, core::DTypeSize(dtype));
      return;
    }
    case Pattern::kExact:
      FromFloat(ExactValue(seed, salt, rank, index), dtype, p);
      return;
    case Pattern::kRandom:
      FromFloat(RandomValue(seed, salt, rank, index), dtype, p);
      return;
  }
}

void Fill(Pattern pattern, uint64_t seed, uint64_t salt, int rank,
          int64_t first_index, int64_t n, DType dtype, uint8_t* out) {
  const int64_t es = core::DTypeSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    Value(pattern, seed, salt, rank, first_index + i, dtype, out + i * es);
  }
}

// Reference reduction of element `index` over ranks: inputs converted to
// fp32, summed in rank order (exact for kExact inputs, so the order does not
// matter), divided by W for the average, rounded once to dtype.
void ReduceReference(Pattern pattern, uint64_t seed, uint64_t salt, int world,
                     int64_t index, DType dtype, ReduceOp op, uint8_t* out) {
  uint8_t tmp[4];
  float sum = 0;
  for (int q = 0; q < world; ++q) {
    Value(pattern, seed, salt, q, index, dtype, tmp);
    sum += ToFloat(tmp, dtype);
  }
  if (op == ReduceOp::kAverage) sum /= static_cast<float>(world);
  FromFloat(sum, dtype, out);
}

uint64_t Fnv(uint64_t h, const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(v));
  return buf;
}

// ------------------------------------------------------------- checker ---

class Checker {
 public:
  // Compares n elements bit for bit; records the first mismatch.
  void Bytes(absl::string_view what, const uint8_t* got, const uint8_t* want,
             int64_t n, int64_t elem_size) {
    ++checks_;
    if (std::memcmp(got, want, n * elem_size) == 0) return;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(got + i * elem_size, want + i * elem_size, elem_size) !=
          0) {
        uint64_t g = 0, w = 0;
        std::memcpy(&g, got + i * elem_size, std::min<int64_t>(elem_size, 8));
        std::memcpy(&w, want + i * elem_size, std::min<int64_t>(elem_size, 8));
        Failure(absl::StrCat(what, ": element ", i, " of ", n, " is 0x", Hex(g),
                             ", want 0x", Hex(w)));
        return;
      }
    }
  }
  void True(bool ok, absl::string_view what) {
    ++checks_;
    if (!ok) Failure(what);
  }
  void Ok(const absl::Status& status, absl::string_view what) {
    ++checks_;
    if (!status.ok()) Failure(absl::StrCat(what, ": ", status.ToString()));
  }
  void Failure(absl::string_view message) {
    ++failures_;
    if (failures_ <= 20) std::cerr << "CHECK FAILED: " << message << std::endl;
  }
  int64_t checks() const { return checks_; }
  int64_t failures() const { return failures_; }

 private:
  int64_t checks_ = 0;
  int64_t failures_ = 0;
};

// ------------------------------------------------------------ helpers ---

absl::StatusOr<std::unique_ptr<Collective>> Connect(const Flags& f,
                                                    FileStore& store, int rank,
                                                    int size, int64_t epoch) {
  GlooCollectiveOptions options;
  options.rank = rank;
  options.size = size;
  options.epoch = epoch;
  options.group = f.group;
  options.hostname = "127.0.0.1";
  options.connect_timeout = absl::Milliseconds(f.connect_timeout_ms);
  options.default_op_timeout = absl::Milliseconds(f.op_timeout_ms);
  if (f.transport == "gloo") return CreateGlooCollective(options, store);
  HostCollectiveOptions host;
  host.gloo = options;
  host.transport = TransportMode::kShm;
  return CreateHostCollective(host, store);
}

std::vector<int64_t> EvenCounts(int64_t total, int world) {
  return std::vector<int64_t>(
      world, std::max<int64_t>(1, (total + world - 1) / world));
}

// Zeros for every rank r with r % 3 == 1, the rest proportional to r + 1.
std::vector<int64_t> UnevenCounts(int64_t total, int world) {
  std::vector<int64_t> weights(world), counts(world);
  int64_t weight_sum = 0;
  for (int r = 0; r < world; ++r) {
    weights[r] = r % 3 == 1 ? 0 : r + 1;
    weight_sum += weights[r];
  }
  int64_t assigned = 0;
  int last = 0;
  for (int r = 0; r < world; ++r) {
    counts[r] = total * weights[r] / weight_sum;
    assigned += counts[r];
    if (weights[r] > 0) last = r;
  }
  counts[last] += total - assigned;
  return counts;
}

int64_t Sum(const std::vector<int64_t>& v, int end) {
  int64_t s = 0;
  for (int i = 0; i < end; ++i) s += v[i];
  return s;
}

std::string CountsString(const std::vector<int64_t>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) {
    absl::StrAppend(&s, i == 0 ? "" : "/", counts[i]);
  }
  return s;
}

const char* OpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "avg"; }

// Expected Stats() totals, kept next to the operations.
struct Expected {
  int64_t calls[static_cast<int>(OpKind::kNumOpKinds)] = {};
  int64_t bytes[static_cast<int>(OpKind::kNumOpKinds)] = {};
  void Add(OpKind kind, int64_t b) {
    ++calls[static_cast<int>(kind)];
    bytes[static_cast<int>(kind)] += b;
  }
};

// --------------------------------------------------------- correctness ---

class CorrectnessRun {
 public:
  CorrectnessRun(const Flags& f, Collective& comm)
      : f_(f), comm_(comm), rank_(comm.rank()), world_(comm.size()) {
    options_.timeout = absl::Milliseconds(f.op_timeout_ms);
  }

  void Run() {
    int size_index = 0;
    for (DType dtype : f_.dtypes) {
      for (const std::string& spec : f_.sizes) {
        OneSize(spec, dtype, size_index++);
      }
      if (dtype == DType::kFloat32) {
        for (const std::string& spec : f_.fp32_sizes) {
          OneSize(spec, dtype, size_index++);
        }
      }
    }
    Pipelined();
    Barrier();
    StatsTotals();
    InvalidArguments();
  }

  const Checker& checker() const { return checker_; }

 private:
  void OneSize(const std::string& spec, DType dtype, int size_index) {
    const int64_t n = Elements(spec, dtype);
    const std::string tag =
        absl::StrCat(core::DTypeName(dtype), " n=", n, " (", spec, ")");
    AllGather(n, dtype, EvenCounts(n, world_), false, tag + " even");
    AllGather(n, dtype, UnevenCounts(n, world_), false, tag + " uneven");
    AllGather(n, dtype, UnevenCounts(n, world_), true, tag + " uneven inplace");
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      ReduceScatter(n, dtype, EvenCounts(n, world_), op, tag + " even");
      ReduceScatter(n, dtype, UnevenCounts(n, world_), op, tag + " uneven");
      AllReduce(n, dtype, op, tag);
    }
    // Roots cycle from the last rank down, so most are non-zero.
    Broadcast(n, dtype, world_ - 1 - size_index % world_, tag);
    // An odd byte count for the 16-bit types.
    SendRecv(n * core::DTypeSize(dtype) + (core::DTypeSize(dtype) == 2), tag);
  }

  uint64_t NextSalt() { return ++salt_; }

  void AllGather(int64_t /*n*/, DType dtype, const std::vector<int64_t>& counts,
                 bool in_place, const std::string& tag) {
    const uint64_t salt = NextSalt();
    const int64_t es = core::DTypeSize(dtype);
    const int64_t total = Sum(counts, world_);
    const int64_t offset = Sum(counts, rank_);
    std::vector<uint8_t> input(std::max<int64_t>(1, counts[rank_] * es));
    std::vector<uint8_t> output(std::max<int64_t>(1, total * es), 0xEE);
    const uint8_t* in_ptr = input.data();
    if (in_place) {
      Fill(Pattern::kBits, f_.seed, salt, rank_, 0, counts[rank_], dtype,
           output.data() + offset * es);
      in_ptr = output.data() + offset * es;
    } else {
      Fill(Pattern::kBits, f_.seed, salt, rank_, 0, counts[rank_], dtype,
           input.data());
    }
    const absl::Status status =
        comm_.AllGather(in_ptr, output.data(), counts, dtype, options_)->Wait();
    const std::string what =
        absl::StrCat("allgather ", tag, " counts=", CountsString(counts));
    checker_.Ok(status, what);
    expected_.Add(OpKind::kAllGather, total * es);
    if (!status.ok()) return;
    std::vector<uint8_t> want(std::max<int64_t>(1, total * es));
    for (int q = 0, off = 0; q < world_; off += counts[q], ++q) {
      Fill(Pattern::kBits, f_.seed, salt, q, 0, counts[q], dtype,
           want.data() + off * es);
    }
    checker_.Bytes(what, output.data(), want.data(), total, es);
  }

  void ReduceScatter(int64_t /*n*/, DType dtype,
                     const std::vector<int64_t>& counts, ReduceOp op,
                     const std::string& tag) {
    const uint64_t salt = NextSalt();
    const int64_t es = core::DTypeSize(dtype);
    const int64_t total = Sum(counts, world_);
    const int64_t offset = Sum(counts, rank_);
    std::vector<uint8_t> input(std::max<int64_t>(1, total * es));
    Fill(Pattern::kExact, f_.seed, salt, rank_, 0, total, dtype, input.data());
    std::vector<uint8_t> output(std::max<int64_t>(1, counts[rank_] * es), 0xEE);
    const absl::Status status = comm_
                                    .ReduceScatter(input.data(), output.data(),
                                                   counts, dtype, op, options_)
                                    ->Wait();
    const std::string what =
        absl::StrCat("reducescatter ", OpName(op), " ", tag,
                     " counts=", CountsString(counts));
    checker_.Ok(status, what);
    expected_.Add(OpKind::kReduceScatter, total * es);
    if (!status.ok()) return;
    std::vector<uint8_t> want(std::max<int64_t>(1, counts[rank_] * es));
    for (int64_t i = 0; i < counts[rank_]; ++i) {
      ReduceReference(Pattern::kExact, f_.seed, salt, world_, offset + i, dtype,
                      op, want.data() + i * es);
    }
    checker_.Bytes(what, output.data(), want.data(), counts[rank_], es);
  }

  void AllReduce(int64_t n, DType dtype, ReduceOp op, const std::string& tag) {
    const uint64_t salt = NextSalt();
    const int64_t es = core::DTypeSize(dtype);
    std::vector<uint8_t> buffer(std::max<int64_t>(1, n * es));
    Fill(Pattern::kExact, f_.seed, salt, rank_, 0, n, dtype, buffer.data());
    const absl::Status status =
        comm_.AllReduce(buffer.data(), n, dtype, op, options_)->Wait();
    const std::string what = absl::StrCat("allreduce ", OpName(op), " ", tag);
    checker_.Ok(status, what);
    expected_.Add(OpKind::kAllReduce, n * es);
    if (!status.ok()) return;
    std::vector<uint8_t> want(std::max<int64_t>(1, n * es));
    for (int64_t i = 0; i < n; ++i) {
      ReduceReference(Pattern::kExact, f_.seed, salt, world_, i, dtype, op,
                      want.data() + i * es);
    }
    checker_.Bytes(what, buffer.data(), want.data(), n, es);
  }

  void Broadcast(int64_t n, DType dtype, int root, const std::string& tag) {
    const uint64_t salt = NextSalt();
    const int64_t es = core::DTypeSize(dtype);
    std::vector<uint8_t> buffer(std::max<int64_t>(1, n * es));
    // Non-roots start with their own garbage, which must be overwritten.
    Fill(Pattern::kBits, f_.seed, salt, rank_, 0, n, dtype, buffer.data());
    const absl::Status status =
        comm_.Broadcast(buffer.data(), n, dtype, root, options_)->Wait();
    const std::string what = absl::StrCat("broadcast root=", root, " ", tag);
    checker_.Ok(status, what);
    expected_.Add(OpKind::kBroadcast, n * es);
    if (!status.ok()) return;
    std::vector<uint8_t> want(std::max<int64_t>(1, n * es));
    Fill(Pattern::kBits, f_.seed, salt, root, 0, n, dtype, want.data());
    checker_.Bytes(what, buffer.data(), want.data(), n, es);
  }

  // Ring: rank r sends to r+1 and receives from r-1. Even ranks send first,
  // odd ranks receive first, so that no cycle of blocked senders forms
  // (operations run one at a time in issue order).
  void SendRecv(int64_t bytes, const std::string& tag) {
    if (world_ < 2) return;
    const uint64_t salt = NextSalt();
    const uint32_t msg_tag = static_cast<uint32_t>(salt & 0xffff);
    const int next = (rank_ + 1) % world_;
    const int prev = (rank_ + world_ - 1) % world_;
    std::vector<uint8_t> out(std::max<int64_t>(1, bytes));
    std::vector<uint8_t> in(std::max<int64_t>(1, bytes), 0xEE);
    for (int64_t i = 0; i < bytes; ++i) {
      out[i] = static_cast<uint8_t>(Hash(f_.seed, salt, rank_, i));
    }
    absl::Status first, second;
    if (rank_ % 2 == 0) {
      first = comm_.Send(out.data(), bytes, next, msg_tag, options_)->Wait();
      second = comm_.Recv(in.data(), bytes, prev, msg_tag, options_)->Wait();
    } else {
      first = comm_.Recv(in.data(), bytes, prev, msg_tag, options_)->Wait();
      second = comm_.Send(out.data(), bytes, next, msg_tag, options_)->Wait();
    }
    const std::string what = absl::StrCat("sendrecv bytes=", bytes, " ", tag);
    checker_.Ok(first, what + " (first)");
    checker_.Ok(second, what + " (second)");
    expected_.Add(OpKind::kSend, bytes);
    expected_.Add(OpKind::kRecv, bytes);
    if (!first.ok() || !second.ok()) return;
    std::vector<uint8_t> want(std::max<int64_t>(1, bytes));
    for (int64_t i = 0; i < bytes; ++i) {
      want[i] = static_cast<uint8_t>(Hash(f_.seed, salt, prev, i));
    }
    checker_.Bytes(what, in.data(), want.data(), bytes, 1);
  }

  // A burst of async all-gathers issued before any is waited for (the
  // prefetch pattern): they run in issue order and each lands in its own
  // buffer.
  void Pipelined() {
    constexpr int kBurst = 8;
    const DType dtype = DType::kBFloat16;
    const int64_t es = core::DTypeSize(dtype);
    std::vector<uint64_t> salts;
    std::vector<std::vector<int64_t>> counts;
    std::vector<std::vector<uint8_t>> inputs, outputs;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kBurst; ++k) {
      salts.push_back(NextSalt());
      counts.push_back(k % 2 ? UnevenCounts(1000 + 37 * k, world_)
                             : EvenCounts(1000 + 37 * k, world_));
      const int64_t total = Sum(counts[k], world_);
      inputs.emplace_back(std::max<int64_t>(1, counts[k][rank_] * es));
      outputs.emplace_back(total * es, 0xEE);
      Fill(Pattern::kBits, f_.seed, salts[k], rank_, 0, counts[k][rank_], dtype,
           inputs[k].data());
    }
    for (int k = 0; k < kBurst; ++k) {
      works.push_back(comm_.AllGather(inputs[k].data(), outputs[k].data(),
                                      counts[k], dtype, options_));
      expected_.Add(OpKind::kAllGather, Sum(counts[k], world_) * es);
    }
    for (int k = 0; k < kBurst; ++k) {
      const std::string what = absl::StrCat("pipelined allgather ", k);
      const absl::Status status = works[k]->Wait();
      checker_.Ok(status, what);
      checker_.True(works[k]->Done(), what + ": Done() after Wait()");
      checker_.True(works[k]->Wait().code() == status.code(),
                    what + ": second Wait() differs");
      if (!status.ok()) continue;
      const int64_t total = Sum(counts[k], world_);
      std::vector<uint8_t> want(total * es);
      for (int q = 0, off = 0; q < world_; off += counts[k][q], ++q) {
        Fill(Pattern::kBits, f_.seed, salts[k], q, 0, counts[k][q], dtype,
             want.data() + off * es);
      }
      checker_.Bytes(what, outputs[k].data(), want.data(), total, es);
    }
  }

  void Barrier() {
    checker_.Ok(comm_.Barrier(options_)->Wait(), "barrier");
    expected_.Add(OpKind::kBarrier, 0);
  }

  void StatsTotals() {
    const CollectiveStats stats = comm_.Stats();
    for (int k = 0; k < static_cast<int>(OpKind::kNumOpKinds); ++k) {
      const OpKind kind = static_cast<OpKind>(k);
      const OpCounters& c = stats.of(kind);
      const std::string name(OpKindName(kind));
      checker_.True(c.calls == expected_.calls[k],
                    absl::StrCat("Stats ", name, ".calls = ", c.calls,
                                 ", want ", expected_.calls[k]));
      checker_.True(c.bytes == expected_.bytes[k],
                    absl::StrCat("Stats ", name, ".bytes = ", c.bytes,
                                 ", want ", expected_.bytes[k]));
      checker_.True(c.failures == 0,
                    absl::StrCat("Stats ", name, ".failures = ", c.failures));
      checker_.True(c.calls == 0 || c.busy > absl::ZeroDuration(),
                    absl::StrCat("Stats ", name, ".busy is zero"));
    }
  }

  // Every rank issues the same invalid operations: each fails alone with
  // INVALID_ARGUMENT and the communicator stays usable.
  void InvalidArguments() {
    float x[4] = {1, 2, 3, 4};
    float y[64] = {};
    auto expect_invalid = [&](const std::shared_ptr<Work>& work,
                              absl::string_view what) {
      const absl::Status status = work->Wait();
      checker_.True(absl::IsInvalidArgument(status),
                    absl::StrCat(what, ": got ", status.ToString(),
                                 ", want INVALID_ARGUMENT"));
    };
    expect_invalid(comm_.AllGather(x, y, std::vector<int64_t>(world_ + 1, 1),
                                   DType::kFloat32, options_),
                   "allgather with W+1 counts");
    std::vector<int64_t> negative(world_, 1);
    negative[0] = -1;
    expect_invalid(comm_.ReduceScatter(x, y, negative, DType::kFloat32,
                                       ReduceOp::kSum, options_),
                   "reducescatter with a negative count");
    expect_invalid(comm_.Broadcast(x, 4, DType::kFloat32, world_, options_),
                   "broadcast from root W");
    expect_invalid(comm_.Send(x, 4, world_, 1, options_), "send to peer W");
    expect_invalid(comm_.Recv(y, 4, -1, 1, options_), "recv from peer -1");
    expect_invalid(
        comm_.AllReduce(x, 4, static_cast<DType>(99), ReduceOp::kSum, options_),
        "allreduce of dtype 99");
    checker_.Ok(comm_.AsyncError(), "AsyncError after invalid arguments");
    // Still usable.
    float v[3] = {1.0f * rank_, 2, 0.5f};
    checker_.Ok(
        comm_.AllReduce(v, 3, DType::kFloat32, ReduceOp::kSum, options_)
            ->Wait(),
        "allreduce after invalid arguments");
    const float w = static_cast<float>(world_);
    checker_.True(v[0] == w * (w - 1) / 2 && v[1] == 2 * w && v[2] == 0.5f * w,
                  "allreduce after invalid arguments: wrong values");
  }

  const Flags& f_;
  Collective& comm_;
  const int rank_;
  const int world_;
  OpOptions options_;
  Checker checker_;
  Expected expected_;
  uint64_t salt_ = 0;
};

int RunCorrectness(const Flags& f) {
  FileStore store(f.store);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Collective>> comm =
      Connect(f, store, f.rank, f.size, f.epoch);
  Check(comm.status(), "CreateGlooCollective");
  const absl::Duration connect = absl::Now() - start;
  CorrectnessRun run(f, **comm);
  run.Run();
  const absl::Duration total = absl::Now() - start;
  comm->reset();
  std::cout << "RESULT scenario=correctness rank=" << f.rank
            << " size=" << f.size << " checks=" << run.checker().checks()
            << " failures=" << run.checker().failures()
            << " connect_ms=" << absl::ToInt64Milliseconds(connect)
            << " total_ms=" << absl::ToInt64Milliseconds(total) << std::endl;
  return run.checker().failures() == 0 ? 0 : 1;
}

// --------------------------------------------------------- determinism ---

int RunDeterminism(const Flags& f) {
  FileStore store(f.store);
  absl::StatusOr<std::unique_ptr<Collective>> comm =
      Connect(f, store, f.rank, f.size, f.epoch);
  Check(comm.status(), "CreateGlooCollective");
  Collective& c = **comm;
  const int world = f.size;
  OpOptions options;
  options.timeout = absl::Milliseconds(f.op_timeout_ms);
  Checker checker;
  uint64_t hash = kFnvBasis, allreduce_hash = kFnvBasis;
  uint64_t salt = 1000;

  // |got - exact| must be within the fp32 accumulation bound plus one
  // rounding to the output type.
  auto check_close = [&](const std::string& what, const uint8_t* got,
                         DType dtype, ReduceOp op, uint64_t s, int64_t first,
                         int64_t n) {
    const int64_t es = core::DTypeSize(dtype);
    const double out_eps = dtype == DType::kFloat32    ? 0x1.0p-24
                           : dtype == DType::kBFloat16 ? 0x1.0p-8
                                                       : 0x1.0p-11;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double exact = 0, magnitude = 0;
      uint8_t tmp[4];
      for (int q = 0; q < world; ++q) {
        Value(Pattern::kRandom, f.seed, s, q, first + i, dtype, tmp);
        const double x = ToFloat(tmp, dtype);
        exact += x;
        magnitude += std::fabs(x);
      }
      double bound = magnitude * world * 0x1.0p-24;
      if (op == ReduceOp::kAverage) {
        exact /= world;
        bound /= world;
      }
      bound += std::fabs(exact) * (out_eps + 0x1.0p-24) + 1e-30;
      const double value = ToFloat(got + i * es, dtype);
      if (!(std::fabs(value - exact) <= bound)) {
        if (bad++ == 0) {
          checker.Failure(absl::StrCat(what, ": element ", first + i, " = ",
                                       value, ", exact ", exact, ", bound ",
                                       bound));
        }
      }
    }
    checker.True(bad == 0, what);
  };

  for (DType dtype : f.dtypes) {
    const int64_t es = core::DTypeSize(dtype);
    for (const std::string& spec : f.sizes) {
      const int64_t n = Elements(spec, dtype);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        const std::string tag =
            absl::StrCat(core::DTypeName(dtype), " n=", n, " ", OpName(op));
        {
          const uint64_t s = ++salt;
          std::vector<uint8_t> buffer(std::max<int64_t>(1, n * es));
          Fill(Pattern::kRandom, f.seed, s, f.rank, 0, n, dtype, buffer.data());
          const absl::Status status =
              c.AllReduce(buffer.data(), n, dtype, op, options)->Wait();
          checker.Ok(status, "allreduce " + tag);
          if (status.ok()) {
            check_close("allreduce " + tag, buffer.data(), dtype, op, s, 0, n);
            hash = Fnv(hash, buffer.data(), n * es);
            allreduce_hash = Fnv(allreduce_hash, buffer.data(), n * es);
          }
        }
        {
          const uint64_t s = ++salt;
          const std::vector<int64_t> counts = UnevenCounts(n, world);
          const int64_t total = Sum(counts, world);
          std::vector<uint8_t> input(std::max<int64_t>(1, total * es));
          std::vector<uint8_t> output(
              std::max<int64_t>(1, counts[f.rank] * es));
          Fill(Pattern::kRandom, f.seed, s, f.rank, 0, total, dtype,
               input.data());
          const absl::Status status =
              c.ReduceScatter(input.data(), output.data(), counts, dtype, op,
                              options)
                  ->Wait();
          checker.Ok(status, "reducescatter " + tag);
          if (status.ok()) {
            check_close("reducescatter " + tag, output.data(), dtype, op, s,
                        Sum(counts, f.rank), counts[f.rank]);
            hash = Fnv(hash, output.data(), counts[f.rank] * es);
          }
        }
      }
    }
  }
  comm->reset();
  std::cout << "RESULT scenario=determinism rank=" << f.rank
            << " checks=" << checker.checks()
            << " failures=" << checker.failures() << " hash=" << Hex(hash)
            << " allreduce_hash=" << Hex(allreduce_hash) << std::endl;
  return checker.failures() == 0 ? 0 : 1;
}

// --------------------------------------------------------------- fault ---

// The epoch+1 communicator: forms, all-reduces a known pattern, barriers.
// Returns a description for the RESULT line or fails the process.
std::string RunNextEpoch(const Flags& f, FileStore& store, int rank, int size) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Collective>> comm =
      Connect(f, store, rank, size, f.epoch + 1);
  Check(comm.status(),
        absl::StrCat("epoch ", f.epoch + 1, " CreateGlooCollective rank ", rank,
                     "/", size));
  OpOptions options;
  options.timeout = absl::Seconds(30);
  constexpr int64_t kN = 1 << 16;
  std::vector<float> v(kN);
  for (int64_t i = 0; i < kN; ++i) {
    v[i] = static_cast<float>((rank + 1) * (i % 97));
  }
  Check((*comm)
            ->AllReduce(v.data(), kN, DType::kFloat32, ReduceOp::kSum, options)
            ->Wait(),
        "epoch+1 allreduce");
  const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
  for (int64_t i = 0; i < kN; ++i) {
    if (v[i] != ranks_sum * static_cast<float>(i % 97)) {
      Fail(absl::StrCat("epoch+1 allreduce: element ", i, " = ", v[i],
                        ", want ", ranks_sum * static_cast<float>(i % 97)));
    }
  }
  Check((*comm)->Barrier(options)->Wait(), "epoch+1 barrier");
  comm->reset();
  return absl::StrCat(
      "epoch2=ok epoch2_rank=", rank, " epoch2_size=", size,
      " epoch2_ms=", absl::ToInt64Milliseconds(absl::Now() - start));
}

OpKind KindOf(absl::string_view op, int rank) {
  if (op == "allgather") return OpKind::kAllGather;
  if (op == "reducescatter") return OpKind::kReduceScatter;
  if (op == "allreduce") return OpKind::kAllReduce;
  if (op == "broadcast") return OpKind::kBroadcast;
  if (op == "barrier") return OpKind::kBarrier;
  // sendrecv: the first operation of this rank in the ring.
  if (op == "sendrecv") return rank % 2 == 0 ? OpKind::kSend : OpKind::kRecv;
  Fail(absl::StrCat("unknown --op ", op), 2);
}

int RunFault(const Flags& f) {
  if (f.victim < 0 || f.victim >= f.size) Fail("--victim out of range", 2);
  if (f.signal != "kill" && f.signal != "stop") {
    Fail("--signal must be kill or stop", 2);
  }
  const int world = f.size;
  const int rank = f.rank;
  const OpKind kind = KindOf(f.op, rank);
  const int threads_baseline = testing::CountThreads();
  FileStore store(f.store);
  absl::StatusOr<std::unique_ptr<Collective>> created =
      Connect(f, store, rank, world, f.epoch);
  Check(created.status(), "CreateGlooCollective");
  std::unique_ptr<Collective> comm = std::move(*created);
  OpOptions options;
  options.timeout = absl::Milliseconds(f.op_timeout_ms);

  // Buffers: allocated and written (pre-faulted) before the operation.
  const int64_t n = f.fault_bytes / 4;  // fp32 elements of the whole buffer
  const int64_t shard = n / world;
  std::vector<float> big(n), small(std::max<int64_t>(shard, 1));
  for (int64_t i = 0; i < n; ++i) big[i] = static_cast<float>(i % 7);
  for (int64_t i = 0; i < shard; ++i) small[i] = 1;
  const std::vector<int64_t> counts(world, shard);
  const int next = (rank + 1) % world;
  const int prev = (rank + world - 1) % world;

  // Issues this rank's operation; sendrecv issues both halves in ring order.
  auto issue = [&]() -> std::vector<std::shared_ptr<Work>> {
    if (f.op == "allgather") {
      return {comm->AllGather(small.data(), big.data(), counts, DType::kFloat32,
                              options)};
    } else if (f.op == "reducescatter") {
      return {comm->ReduceScatter(big.data(), small.data(), counts,
                                  DType::kFloat32, ReduceOp::kSum, options)};
    } else if (f.op == "allreduce") {
      return {comm->AllReduce(big.data(), n, DType::kFloat32, ReduceOp::kSum,
                              options)};
    } else if (f.op == "broadcast") {
      // The victim is the root, so that no survivor can finish without it.
      return {
          comm->Broadcast(big.data(), n, DType::kFloat32, f.victim, options)};
    } else if (f.op == "barrier") {
      return {comm->Barrier(options)};
    }
    // sendrecv; then a barrier, so that survivors that are not the victim's
    // neighbours (whose exchange can complete) learn of the failure too.
    std::vector<std::shared_ptr<Work>> works;
    const int64_t bytes = n * 4 / 2;
    if (rank % 2 == 0) {
      works.push_back(comm->Send(big.data(), bytes, next, 7, options));
      works.push_back(comm->Recv(big.data() + n / 2, bytes, prev, 7, options));
    } else {
      works.push_back(comm->Recv(big.data() + n / 2, bytes, prev, 7, options));
      works.push_back(comm->Send(big.data(), bytes, next, 7, options));
    }
    works.push_back(comm->Barrier(options));
    return works;
  };

  // Every rank is connected and idle before the fault.
  Check(comm->Barrier(options)->Wait(), "warm-up barrier");

  if (rank == f.victim) {
    const int sig = f.signal == "kill" ? SIGKILL : SIGSTOP;
    if (f.op != "barrier") {
      const int64_t calls_before = comm->Stats().of(kind).calls;
      std::vector<std::shared_ptr<Work>> works = issue();
      const absl::Time limit = absl::Now() + absl::Seconds(10);
      // Polls our own counter (not another rank): the op is running once
      // its call is counted.
      while (comm->Stats().of(kind).calls == calls_before) {
        if (works[0]->Done()) {
          Fail(absl::StrCat("victim: ", f.op,
                            " finished before its start was "
                            "seen: ",
                            works[0]->Wait().ToString()));
        }
        if (absl::Now() > limit) Fail("victim: the operation never started");
        absl::SleepFor(absl::Microseconds(20));
      }
      std::cout << "VICTIM op=" << f.op << " running; raising " << f.signal
                << std::endl;
      raise(sig);
    } else {
      std::cout << "VICTIM op=barrier: raising " << f.signal
                << " before entering" << std::endl;
      raise(sig);
    }
    // Only reached when continued after SIGSTOP: the driver kills us.
    Fail("victim continued", 5);
  }

  // Survivor.
  const absl::Time start = absl::Now();
  std::vector<std::shared_ptr<Work>> works = issue();
  absl::Status status;
  absl::Duration elapsed;
  for (const std::shared_ptr<Work>& work : works) {
    const absl::Status s = work->Wait();
    if (!s.ok() && status.ok()) {
      status = s;
      elapsed = absl::Now() - start;
    }
  }
  if (status.ok()) elapsed = absl::Now() - start;

  // Later operations fail fast with an error, and AsyncError reports it.
  const absl::Time later_start = absl::Now();
  float x[4] = {1, 2, 3, 4};
  const absl::Status later =
      comm->AllReduce(x, 4, DType::kFloat32, ReduceOp::kSum, options)->Wait();
  const absl::Duration later_elapsed = absl::Now() - later_start;
  const absl::Status async_error = comm->AsyncError();

  const absl::Time destroy_start = absl::Now();
  comm->Abort("fault test: abandoning the epoch");
  comm->Abort("fault test: abandoning the epoch (again)");
  comm.reset();
  const absl::Duration destroy = absl::Now() - destroy_start;

  // Threads the communicator owned are gone (they may take a moment to be
  // reaped by the kernel after join).
  int threads_after = testing::CountThreads();
  const absl::Time thread_limit = absl::Now() + absl::Seconds(2);
  while (threads_after > threads_baseline && absl::Now() < thread_limit) {
    absl::SleepFor(absl::Milliseconds(10));
    threads_after = testing::CountThreads();
  }

  // Epoch + 1.
  int rank2 = rank, size2 = world;
  if (f.epoch2 == "shrink") {
    rank2 = rank < f.victim ? rank : rank - 1;
    size2 = world - 1;
  }
  const std::string next_epoch = RunNextEpoch(f, store, rank2, size2);

  std::cout << "RESULT scenario=fault rank=" << rank << " op=" << f.op
            << " signal=" << f.signal
            << " status=" << absl::StatusCodeToString(status.code())
            << " elapsed_ms=" << absl::ToInt64Milliseconds(elapsed)
            << " later_status=" << absl::StatusCodeToString(later.code())
            << " later_ms=" << absl::ToInt64Milliseconds(later_elapsed)
            << " async_error=" << absl::StatusCodeToString(async_error.code())
            << " destroy_ms=" << absl::ToInt64Milliseconds(destroy)
            << " threads_baseline=" << threads_baseline
            << " threads_after=" << threads_after << " " << next_epoch
            << std::endl;
  std::cerr << "status message: " << status.message() << std::endl;
  return 0;
}

int RunJoin(const Flags& f) {
  FileStore store(f.store);
  // --epoch is the failed epoch; the replacement joins epoch + 1.
  const std::string next_epoch = RunNextEpoch(f, store, f.rank, f.size);
  std::cout << "RESULT scenario=join rank=" << f.rank << " " << next_epoch
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace shardd::comm

int main(int argc, char** argv) {
  // Never outlive the driver, whatever happens to it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 3;
  const shardd::comm::Flags flags = shardd::comm::ParseFlags(argc, argv);
  if (flags.scenario == "correctness") {
    return shardd::comm::RunCorrectness(flags);
  }
  if (flags.scenario == "determinism") {
    return shardd::comm::RunDeterminism(flags);
  }
  if (flags.scenario == "fault") return shardd::comm::RunFault(flags);
  if (flags.scenario == "join") return shardd::comm::RunJoin(flags);
  shardd::comm::Fail(absl::StrCat("unknown --scenario '", flags.scenario, "'"),
                     2);
}
