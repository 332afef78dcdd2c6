// Process-level test of initial values of any size (issue #18): a
// coordinator (W = 2, F = 2) and two shardd processes on 127.0.0.1; the test
// is both trainers. It puts the initial values in a shared-memory file and
// registers a model that names them; the daemons agree on digests (the
// rendezvous store never sees a value) and each reads only its shard.
//
//   LargeValuesStayWithinThePlan: 1 GiB of fp32 values registers, every
//     daemon's peak resident memory (VmHWM) stays within its baseline at
//     start + its memory plan + SharedMemoryInitReader::kWindowBytes (+ a
//     small fixed allowance for registration's bookkeeping), and
//     the gathered parameters equal the values.
//   MismatchedValuesAreRefusedNamingTheTensor: the trainers' values differ
//     in one element: FAILED_PRECONDITION on both ranks naming the unit and
//     tensor, nothing registered.
//   RanksLoadingOtherFilesAreRefusedNamingLoadFrom: the same for load_from
//     files of other contents; the same contents at two paths load.
//   AFullExportOneRankNeverJoinsFailsCleanly: a FULL export on one rank
//     alone fails on it within the collective timeout (the third
//     argument), no epoch changes, and the export on both then works.
//
//   shardd_init_values_test COORDINATOR_BINARY SHARDD_BINARY
//       [COLLECTIVE_TIMEOUT_MS]

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/node/shared_memory_init_reader.h"
#include "daemon/testing/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;
using memory::SharedMemorySegment;

std::string g_coordinator_binary;
std::string g_shardd_binary;
// The daemons' --collective_timeout_ms (the third argument; also the
// window in which every rank must join a FULL export).
std::string g_collective_timeout_ms = "60000";

constexpr int kW = 2;
constexpr int64_t kMiB = int64_t{1} << 20;
// Registration's own bookkeeping beyond the plan and the read window (the
// request and its parse, the agreement, engine metadata, the handler
// thread's stack, allocator slack): measured at ~0.3 MiB on 1 GiB of
// values, and independent of their size.
constexpr int64_t kBookkeepingBytes = 4 * kMiB;

std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoSeconds(timeout));
  return ctx;
}

// A field of /proc/PID/status in bytes ("VmHWM", "VmRSS"), -1 if absent.
int64_t ProcStatusBytes(pid_t pid, absl::string_view field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, absl::StrCat(field, ":"))) continue;
    std::vector<std::string> parts =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t kb = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb * 1024;
  }
  return -1;
}

// Element i of the values the trainer puts in shared memory (exact in
// fp32, varied enough that a misplaced slice shows).
float Value(int64_t i) { return static_cast<float>(i % 4093) * 0.001f - 2.0f; }

class ShardInitValuesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardd-init-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    shm_dir_ = dir_ + "/shm";
    ASSERT_EQ(mkdir(shm_dir_.c_str(), 0700), 0);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    auto c = Subprocess::Spawn({g_coordinator_binary, "--listen=127.0.0.1:0",
                                "--world_size=2", "--sharding_factor=2"},
                               "coordinator");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    auto line = coordinator_->WaitForLine("coordinator listening on", deadline);
    ASSERT_TRUE(line.ok()) << line.status();
    std::string rest = line->substr(line->find(" on ") + 4);
    const std::string address = rest.substr(0, rest.find(' '));
    for (int r = 0; r < kW; ++r) {
      const std::string socket = absl::StrCat(dir_, "/r", r, ".sock");
      auto d = Subprocess::Spawn(
          {g_shardd_binary, absl::StrCat("--coordinator=", address),
           absl::StrCat("--identity=node-", r), absl::StrCat("--rank=", r),
           absl::StrCat("--shm_dir=", shm_dir_),
           absl::StrCat("--listen_unix=", socket), "--peer_listen=127.0.0.1:0",
           absl::StrCat("--collective_timeout_ms=", g_collective_timeout_ms)},
          absl::StrCat("shardd-", r));
      ASSERT_TRUE(d.ok()) << d.status();
      daemons_.push_back(std::move(*d));
      stubs_.push_back(pb::Trainer::NewStub(
          grpc::CreateChannel(absl::StrCat("unix:", socket),
                              grpc::experimental::LocalCredentials(UDS))));
    }
    for (int r = 0; r < kW; ++r) {
      auto ready = daemons_[r]->WaitForLine("shardd rank", deadline);
      ASSERT_TRUE(ready.ok()) << ready.status();
    }
  }

  void TearDown() override {
    stubs_.clear();
    daemons_.clear();
    coordinator_.reset();
    for (const std::string& path : segments_) unlink(path.c_str());
    if (!dir_.empty()) {
      const std::string command = absl::StrCat("rm -rf '", dir_, "'");
      (void)system(command.c_str());
    }
  }

  // A trainer's shared-memory file of `bytes` bytes under /dev/shm holding
  // Value(i) as fp32 (the trainer keeps it mapped for the test's life).
  SharedMemorySegment* MakeValues(const std::string& name, int64_t bytes) {
    absl::StatusOr<SharedMemorySegment> seg =
        SharedMemorySegment::Create("/dev/shm", name, bytes);
    EXPECT_TRUE(seg.ok()) << seg.status();
    if (!seg.ok()) return nullptr;
    float* p = static_cast<float*>(seg->mutable_data());
    for (int64_t i = 0; i < bytes / 4; ++i) p[i] = Value(i);
    segments_.push_back(seg->path());
    owned_.push_back(std::make_unique<SharedMemorySegment>(*std::move(seg)));
    return owned_.back().get();
  }

  // `units` units of one [rows, cols] fp32 tensor "w" each, whose values
  // are consecutive ranges of `values`; SGD.
  static pb::ModelSpec Model(const SharedMemorySegment& values, int units,
                             int64_t rows, int64_t cols) {
    pb::ModelSpec spec;
    const int64_t bytes = rows * cols * 4;
    for (int u = 0; u < units; ++u) {
      pb::UnitSpec* unit = spec.add_units();
      unit->set_name(absl::StrCat("layer", u));
      pb::TensorSpec* t = unit->add_tensors();
      t->set_name("w");
      t->add_shape(rows);
      t->add_shape(cols);
      t->set_dtype(pb::DTYPE_FP32);
      pb::SharedMemoryRef* ref = t->mutable_init()->mutable_shared_memory();
      ref->set_path(values.path());
      ref->set_segment_bytes(values.size());
      ref->set_byte_offset(u * bytes);
      ref->set_byte_length(bytes);
    }
    pb::ShardingConfig* c = spec.mutable_config();
    c->set_strategy(pb::SHARDING_STRATEGY_FULL_SHARD);
    c->set_sharding_factor(kW);
    c->set_max_gathered_units(1);
    c->mutable_optimizer()->mutable_sgd()->set_lr(0.01);
    return spec;
  }

  // True once both daemons report a ready epoch; polls, with a deadline.
  bool WaitUntilReady(absl::Time deadline) {
    while (absl::Now() < deadline) {
      int ready = 0;
      for (int r = 0; r < kW; ++r) {
        pb::GetStatusResponse status;
        if (stubs_[r]
                ->GetStatus(Ctx(absl::Seconds(5)).get(), pb::GetStatusRequest(),
                            &status)
                .ok() &&
            status.ready()) {
          ++ready;
        }
      }
      if (ready == kW) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // RegisterModel on both ranks at once, each with its own model.
  std::vector<grpc::Status> RegisterBoth(
      const std::vector<pb::ModelSpec>& models,
      std::vector<pb::RegisterModelResponse>* responses,
      const std::vector<std::string>& load_from = {}) {
    responses->assign(kW, pb::RegisterModelResponse());
    std::vector<grpc::Status> statuses(kW);
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] {
        pb::RegisterModelRequest request;
        *request.mutable_model() = models[r];
        request.set_transport(pb::TRANSPORT_SHARED_MEMORY);
        if (!load_from.empty()) request.set_load_from(load_from[r]);
        statuses[r] = stubs_[r]->RegisterModel(Ctx(absl::Seconds(240)).get(),
                                               request, &(*responses)[r]);
      });
    }
    for (auto& t : threads) t.join();
    return statuses;
  }

  std::string dir_, shm_dir_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> daemons_;
  std::vector<std::unique_ptr<pb::Trainer::Stub>> stubs_;
  std::vector<std::string> segments_;
  std::vector<std::unique_ptr<SharedMemorySegment>> owned_;
};

TEST_F(ShardInitValuesTest, LargeValuesStayWithinThePlan) {
  // 16 units of 4096 x 4096 fp32: 1 GiB of initial values.
  constexpr int kUnits = 16;
  constexpr int64_t kRows = 4096, kCols = 4096;
  constexpr int64_t kUnitNumel = kRows * kCols;
  // The baseline is taken once the epoch is ready (communicators formed),
  // just before registration.
  ASSERT_TRUE(WaitUntilReady(absl::Now() + absl::Seconds(30)));
  std::vector<int64_t> baseline(kW);
  for (int r = 0; r < kW; ++r) {
    baseline[r] = ProcStatusBytes(daemons_[r]->pid(), "VmRSS");
    ASSERT_GT(baseline[r], 0);
  }
  SharedMemorySegment* values = MakeValues(
      absl::StrCat("shardd-init-test-", getpid()), kUnits * kUnitNumel * 4);
  ASSERT_NE(values, nullptr);
  const pb::ModelSpec model = Model(*values, kUnits, kRows, kCols);
  std::vector<pb::RegisterModelResponse> responses;
  const absl::Time started = absl::Now();
  const std::vector<grpc::Status> statuses =
      RegisterBoth({model, model}, &responses);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(statuses[r].ok())
        << "rank " << r << ": " << statuses[r].error_message();
  }
  for (int r = 0; r < kW; ++r) {
    const int64_t plan = responses[r].memory().planned().total_bytes();
    const int64_t peak = ProcStatusBytes(daemons_[r]->pid(), "VmHWM");
    const int64_t bound = baseline[r] + plan +
                          node::SharedMemoryInitReader::kWindowBytes +
                          kBookkeepingBytes;
    std::printf(
        "rank %d: 1 GiB of fp32 init values registered in %.1f s; baseline "
        "VmRSS %.1f MiB, plan %.1f MiB, window %.1f MiB, bookkeeping %.1f "
        "MiB, peak VmHWM %.1f MiB (bound %.1f MiB, headroom %.1f MiB; peak - "
        "baseline - plan = %.1f MiB)\n",
        r, seconds, baseline[r] / double(kMiB), plan / double(kMiB),
        node::SharedMemoryInitReader::kWindowBytes / double(kMiB),
        kBookkeepingBytes / double(kMiB), peak / double(kMiB),
        bound / double(kMiB), (bound - peak) / double(kMiB),
        (peak - baseline[r] - plan) / double(kMiB));
    std::fflush(stdout);
    EXPECT_GT(plan, 512 * kMiB);  // At least the shard of the parameters.
    EXPECT_LE(peak, bound) << "rank " << r;
  }
  // The gathered parameters are the trainer's values: every element of the
  // first and last units (each rank contributed its slice).
  for (int u : {0, kUnits - 1}) {
    std::vector<pb::GatherResponse> gathered(kW);
    std::vector<grpc::Status> gs(kW);
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] {
        pb::GatherRequest request;
        request.set_unit(u);
        request.set_pass(pb::PASS_FORWARD);
        gs[r] = stubs_[r]->Gather(Ctx(absl::Seconds(60)).get(), request,
                                  &gathered[r]);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < kW; ++r) {
      ASSERT_TRUE(gs[r].ok()) << gs[r].error_message();
      const pb::SharedMemoryRef& ref = gathered[r].params().shared_memory();
      auto seg =
          SharedMemorySegment::Open(ref.path(), ref.segment_bytes(),
                                    SharedMemorySegment::Access::kReadOnly);
      ASSERT_TRUE(seg.ok()) << seg.status();
      const float* p = reinterpret_cast<const float*>(
          static_cast<const char*>(seg->data()) + ref.byte_offset());
      for (int64_t i = 0; i < kUnitNumel; ++i) {
        ASSERT_EQ(p[i], Value(u * kUnitNumel + i))
            << "rank " << r << " unit " << u << " element " << i;
      }
      pb::ReleaseRequest release;
      release.set_unit(u);
      pb::ReleaseResponse released;
      ASSERT_TRUE(stubs_[r]
                      ->Release(Ctx(absl::Seconds(5)).get(), release, &released)
                      .ok());
    }
  }
}

TEST_F(ShardInitValuesTest, MismatchedValuesAreRefusedNamingTheTensor) {
  constexpr int kUnits = 2;
  constexpr int64_t kRows = 64, kCols = 32;
  SharedMemorySegment* mine = MakeValues(
      absl::StrCat("shardd-init-a-", getpid()), kUnits * kRows * kCols * 4);
  SharedMemorySegment* theirs = MakeValues(
      absl::StrCat("shardd-init-b-", getpid()), kUnits * kRows * kCols * 4);
  ASSERT_NE(mine, nullptr);
  ASSERT_NE(theirs, nullptr);
  // One element of unit 1's tensor differs on rank 1.
  static_cast<float*>(theirs->mutable_data())[kRows * kCols + 77] += 1.0f;
  std::vector<pb::RegisterModelResponse> responses;
  const std::vector<grpc::Status> statuses =
      RegisterBoth({Model(*mine, kUnits, kRows, kCols),
                    Model(*theirs, kUnits, kRows, kCols)},
                   &responses);
  for (int r = 0; r < kW; ++r) {
    EXPECT_EQ(statuses[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << "rank " << r << ": " << statuses[r].error_message();
    EXPECT_TRUE(
        absl::StrContains(statuses[r].error_message(), "units[1].tensors[0]"))
        << statuses[r].error_message();
    EXPECT_TRUE(absl::StrContains(statuses[r].error_message(),
                                  "unit 'layer1', tensor 'w'"))
        << statuses[r].error_message();
    pb::GetStatusResponse status;
    ASSERT_TRUE(stubs_[r]
                    ->GetStatus(Ctx(absl::Seconds(5)).get(),
                                pb::GetStatusRequest(), &status)
                    .ok());
    EXPECT_FALSE(status.registered()) << "rank " << r;
  }
}

// A safetensors file as Python's struct/json would write it: tensors
// "layer<u>.w" [rows, cols] fp32 holding Value(i) + shift.
std::string WriteSafetensors(const std::string& path, int units, int64_t rows,
                             int64_t cols, float shift) {
  const int64_t bytes = rows * cols * 4;
  std::string header = "{";
  for (int u = 0; u < units; ++u) {
    absl::StrAppend(&header, u == 0 ? "" : ",", "\"layer", u,
                    ".w\":{\"dtype\":\"F32\",\"shape\":[", rows, ",", cols,
                    "],\"data_offsets\":[", u * bytes, ",", (u + 1) * bytes,
                    "]}");
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) {
    file[i] =
        static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  }
  file += header;
  for (int64_t i = 0; i < units * rows * cols; ++i) {
    const float v = Value(i) + shift;
    file.append(reinterpret_cast<const char*>(&v), 4);
  }
  std::ofstream(path, std::ios::binary) << file;
  return path;
}

// load_from is agreed on like the init values: ranks naming files of other
// contents are both refused, naming the field, before anything registers;
// the same contents at two paths (node-local copies) load.
TEST_F(ShardInitValuesTest, RanksLoadingOtherFilesAreRefusedNamingLoadFrom) {
  constexpr int kUnits = 2;
  constexpr int64_t kRows = 64, kCols = 32;
  SharedMemorySegment* values = MakeValues(
      absl::StrCat("shardd-init-d-", getpid()), kUnits * kRows * kCols * 4);
  ASSERT_NE(values, nullptr);
  const std::string a =
      WriteSafetensors(dir_ + "/a.safetensors", kUnits, kRows, kCols, 0.0f);
  const std::string b =
      WriteSafetensors(dir_ + "/b.safetensors", kUnits, kRows, kCols, 0.25f);
  const std::string a_copy = WriteSafetensors(dir_ + "/a-copy.safetensors",
                                              kUnits, kRows, kCols, 0.0f);
  const pb::ModelSpec model = Model(*values, kUnits, kRows, kCols);
  std::vector<pb::RegisterModelResponse> responses;
  std::vector<grpc::Status> statuses =
      RegisterBoth({model, model}, &responses, {a, b});
  for (int r = 0; r < kW; ++r) {
    EXPECT_EQ(statuses[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << "rank " << r << ": " << statuses[r].error_message();
    EXPECT_TRUE(absl::StartsWith(statuses[r].error_message(),
                                 "load_from: differs from rank"))
        << statuses[r].error_message();
    EXPECT_TRUE(absl::StrContains(statuses[r].error_message(), a))
        << statuses[r].error_message();
    pb::GetStatusResponse status;
    ASSERT_TRUE(stubs_[r]
                    ->GetStatus(Ctx(absl::Seconds(5)).get(),
                                pb::GetStatusRequest(), &status)
                    .ok());
    EXPECT_FALSE(status.registered()) << "rank " << r;
  }
  statuses = RegisterBoth({model, model}, &responses, {a, a_copy});
  for (int r = 0; r < kW; ++r) {
    EXPECT_TRUE(statuses[r].ok())
        << "rank " << r << ": " << statuses[r].error_message();
  }
}

// A FULL export is collective: one that a rank never joins fails on every
// rank that called it, with what was missing, within the daemons'
// collective timeout, before any gather; nobody is reported failed (the
// epoch stays), and the export on both ranks then works.
TEST_F(ShardInitValuesTest, AFullExportOneRankNeverJoinsFailsCleanly) {
  constexpr int kUnits = 2;
  constexpr int64_t kRows = 64, kCols = 32;
  SharedMemorySegment* values = MakeValues(
      absl::StrCat("shardd-init-e-", getpid()), kUnits * kRows * kCols * 4);
  ASSERT_NE(values, nullptr);
  const pb::ModelSpec model = Model(*values, kUnits, kRows, kCols);
  std::vector<pb::RegisterModelResponse> responses;
  std::vector<grpc::Status> statuses = RegisterBoth({model, model}, &responses);
  for (int r = 0; r < kW; ++r) ASSERT_TRUE(statuses[r].ok()) << r;
  ASSERT_TRUE(WaitUntilReady(absl::Now() + absl::Seconds(60)));
  auto epochs = [&] {
    std::vector<int64_t> out;
    for (int r = 0; r < kW; ++r) {
      pb::GetStatusResponse status;
      EXPECT_TRUE(stubs_[r]
                      ->GetStatus(Ctx(absl::Seconds(5)).get(),
                                  pb::GetStatusRequest(), &status)
                      .ok());
      EXPECT_TRUE(status.ready() && status.registered()) << "rank " << r;
      out.push_back(status.epoch());
    }
    return out;
  };
  const std::vector<int64_t> before = epochs();
  // `wrong_step_on`: that rank's request names a step it does not hold.
  auto export_on = [&](const std::vector<int>& ranks, const std::string& path,
                       int wrong_step_on = -1) {
    std::vector<grpc::Status> out(kW);
    std::vector<std::thread> threads;
    for (int r : ranks) {
      threads.emplace_back([&, r] {
        pb::ExportStateRequest request;
        request.set_path(path);
        request.set_layout(pb::EXPORT_LAYOUT_FULL);
        request.set_include_optimizer_state(true);
        if (r == wrong_step_on) request.set_step(99);
        pb::ExportStateResponse response;
        out[r] = stubs_[r]->ExportState(Ctx(absl::Seconds(120)).get(), request,
                                        &response);
      });
    }
    for (std::thread& t : threads) t.join();
    return out;
  };
  const std::string alone = dir_ + "/alone.safetensors";
  statuses = export_on({0}, alone);
  EXPECT_EQ(statuses[0].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << statuses[0].error_message();
  EXPECT_TRUE(absl::StrContains(statuses[0].error_message(),
                                "rank 1 did not call ExportState"))
      << statuses[0].error_message();
  statuses = export_on({1}, alone);
  EXPECT_EQ(statuses[1].error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << statuses[1].error_message();
  EXPECT_TRUE(absl::StrContains(statuses[1].error_message(),
                                "rank 0 did not start one"))
      << statuses[1].error_message();
  // A rank whose request cannot go on (another step) says so at once and
  // never joins: the other fails as if it had not called.
  statuses = export_on({0, 1}, alone, /*wrong_step_on=*/1);
  EXPECT_EQ(statuses[1].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << statuses[1].error_message();
  EXPECT_TRUE(absl::StrContains(statuses[1].error_message(),
                                "99 is not the committed step"))
      << statuses[1].error_message();
  EXPECT_TRUE(absl::StrContains(statuses[0].error_message(),
                                "rank 1 did not call ExportState"))
      << statuses[0].error_message();
  struct stat st;
  EXPECT_NE(stat(alone.c_str(), &st), 0) << "no file from a refused export";
  EXPECT_EQ(epochs(), before) << "nobody was reported failed";
  const std::string both = dir_ + "/both.safetensors";
  statuses = export_on({0, 1}, both);
  for (int r = 0; r < kW; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << r << ": " << statuses[r].error_message();
  }
  EXPECT_EQ(stat(both.c_str(), &st), 0);
  EXPECT_EQ(epochs(), before);
}

TEST_F(ShardInitValuesTest, DeviceBufferValuesNeedADaemonOnAGpu) {
  constexpr int64_t kRows = 8, kCols = 4;
  SharedMemorySegment* values = MakeValues(
      absl::StrCat("shardd-init-c-", getpid()), 2 * kRows * kCols * 4);
  ASSERT_NE(values, nullptr);
  pb::ModelSpec model = Model(*values, 2, kRows, kCols);
  pb::CudaIpcRef* ref = model.mutable_units(1)
                            ->mutable_tensors(0)
                            ->mutable_init()
                            ->mutable_cuda_ipc();
  ref->set_mem_handle(std::string(64, '\1'));
  ref->set_allocation_bytes(kRows * kCols * 4);
  ref->set_byte_length(kRows * kCols * 4);
  std::vector<pb::RegisterModelResponse> responses;
  const std::vector<grpc::Status> statuses =
      RegisterBoth({model, model}, &responses);
  for (int r = 0; r < kW; ++r) {
    EXPECT_EQ(statuses[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << "rank " << r << ": " << statuses[r].error_message();
    EXPECT_TRUE(absl::StrContains(statuses[r].error_message(),
                                  "model.units[1].tensors[0].init.cuda_ipc: "
                                  "an init from a trainer's device buffer "
                                  "needs a daemon on a GPU"))
        << statuses[r].error_message();
    pb::GetStatusResponse status;
    ASSERT_TRUE(stubs_[r]
                    ->GetStatus(Ctx(absl::Seconds(5)).get(),
                                pb::GetStatusRequest(), &status)
                    .ok());
    EXPECT_FALSE(status.registered()) << "rank " << r;
  }
}

}  // namespace
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s COORDINATOR_BINARY SHARDD_BINARY\n",
                 argv[0]);
    return 2;
  }
  shardd::tests::g_coordinator_binary = argv[1];
  shardd::tests::g_shardd_binary = argv[2];
  if (argc > 3) shardd::tests::g_collective_timeout_ms = argv[3];
  return RUN_ALL_TESTS();
}
