// StateExport through real NodeManagers (W = F = 2 in one process, an
// in-process coordinator, Gloo over loopback): the streaming FULL export's
// memory bound, its progress events, a full disk and a missing peer.
#include "daemon/node/state_export.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

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
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/coordinator_ports.h"
#include "daemon/node/node_manager.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

namespace pb = ::shardd::v1;

constexpr int64_t kMiB = int64_t{1} << 20;

std::string TempDir() {
  std::string base = "/tmp/shardd-export-XXXXXX";
  char* made = mkdtemp(base.data());
  EXPECT_NE(made, nullptr);
  return base;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      out.push_back(e->d_name);
    }
  }
  closedir(d);
  return out;
}

// A /proc/self/status field in bytes ("VmHWM", "VmRSS").
int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field + ":")) continue;
    int64_t kb = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    EXPECT_TRUE(absl::SimpleAtoi(digits, &kb)) << line;
    return kb * 1024;
  }
  ADD_FAILURE() << "no " << field << " in /proc/self/status";
  return -1;
}

// Resets VmHWM to the current VmRSS (Linux >= 4.0).
bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return clear.good();
}

// `units` units of one [rows, 1024] fp32 weight each, AdamW, constant init
// (each rank materialises only its shard).
pb::ModelSpec Model(int units, int64_t rows) {
  pb::ModelSpec spec;
  for (int u = 0; u < units; ++u) {
    pb::UnitSpec* unit = spec.add_units();
    unit->set_name(absl::StrCat("layer", u));
    pb::TensorSpec* w = unit->add_tensors();
    w->set_name("weight");
    w->add_shape(rows);
    w->add_shape(1024);
    w->set_dtype(pb::DTYPE_FP32);
    w->mutable_init()->mutable_constant()->set_value(0.25f + u);
  }
  pb::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(pb::SHARDING_STRATEGY_FULL_SHARD);
  c->set_sharding_factor(2);
  c->set_max_gathered_units(1);
  pb::AdamW* adamw = c->mutable_optimizer()->mutable_adamw();
  adamw->set_lr(0.01);
  adamw->set_beta1(0.9);
  adamw->set_beta2(0.999);
  adamw->set_eps(1e-8);
  return spec;
}

class StateExportTest : public ::testing::Test {
 protected:
  // Starts W = F = 2 and registers `model` on both ranks.
  void StartAndRegister(const pb::ModelSpec& model,
                        absl::Duration collective_timeout = absl::Seconds(10)) {
    dir_ = TempDir();
    coordinator::InProcessCoordinatorOptions co;
    co.coordinator.membership.world_size = 2;
    co.coordinator.membership.sharding_factor = 2;
    auto started = coordinator::InProcessCoordinator::Start(co);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    std::vector<absl::StatusOr<std::unique_ptr<NodeManager>>> made(2);
    std::vector<absl::Status> registered(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        NodeOptions o;
        UseCoordinator(coordinator_->address(), nullptr, &o);
        o.identity = absl::StrCat("node-", r);
        o.rank = r;
        o.peer_address = absl::StrCat("127.0.0.1:", 1000 + r);  // Not probed.
        o.shm_dir = dir_;
        o.shm_prefix = absl::StrCat("r", r);
        o.collective_timeout = collective_timeout;
        o.connect_timeout = absl::Seconds(10);
        made[r] = NodeManager::Start(o);
        if (!made[r].ok()) return;
        pb::RegisterModelRequest reg;
        *reg.mutable_model() = model;
        registered[r] = (*made[r])
                            ->RegisterModel(reg, MonoNow() + absl::Seconds(60))
                            .status();
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(made[r].ok()) << made[r].status();
      ASSERT_TRUE(registered[r].ok()) << registered[r];
      nodes_.push_back(std::move(*made[r]));
    }
  }

  void TearDown() override {
    nodes_.clear();
    coordinator_.reset();
    for (const std::string& e : Entries(dir_)) {
      std::remove(absl::StrCat(dir_, "/", e).c_str());
    }
    rmdir(dir_.c_str());
  }

  // ExportState on the given ranks at once.
  std::vector<absl::StatusOr<pb::ExportStateResponse>> Export(
      const pb::ExportStateRequest& request, std::vector<int> ranks = {0, 1}) {
    std::vector<absl::StatusOr<pb::ExportStateResponse>> out(
        2, absl::UnknownError("not called"));
    std::vector<std::thread> threads;
    for (int r : ranks) {
      threads.emplace_back([&, r] {
        // A ready epoch first (the coordinator may still be settling).
        const auto ready = nodes_[r]->WaitReady(pb::WaitReadyRequest(),
                                                MonoNow() + absl::Seconds(30));
        if (!ready.ok()) {
          out[r] = ready.status();
          return;
        }
        out[r] = nodes_[r]->ExportState(request, MonoNow() + absl::Seconds(60));
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  pb::ExportStateRequest FullRequest(const std::string& name) {
    pb::ExportStateRequest request;
    request.set_path(absl::StrCat(dir_, "/", name));
    request.set_layout(pb::EXPORT_LAYOUT_FULL);
    request.set_include_optimizer_state(true);
    return request;
  }

  std::string dir_;
  std::unique_ptr<coordinator::InProcessCoordinator> coordinator_;
  std::vector<std::unique_ptr<NodeManager>> nodes_;
};

// The model (16 units of 8 MiB, with AdamW state a 384 MiB file) is written
// while the process's peak RSS (both ranks live in it) grows by about one
// gathered unit per rank, not by the model.
TEST_F(StateExportTest, FullExportPeakMemoryIsAboutOneUnitNotTheModel) {
  constexpr int kUnits = 16;
  constexpr int64_t kRows = 2048;  // 2048 x 1024 fp32 = 8 MiB a unit.
  const int64_t unit_bytes = kRows * 1024 * 4;
  StartAndRegister(Model(kUnits, kRows));
  if (!ResetPeakRss()) GTEST_SKIP() << "cannot reset VmHWM";
  const int64_t before = ProcStatusBytes("VmHWM");
  const auto exported = Export(FullRequest("full.safetensors"));
  const int64_t peak = ProcStatusBytes("VmHWM");
  ASSERT_TRUE(exported[0].ok()) << exported[0].status();
  ASSERT_TRUE(exported[1].ok()) << exported[1].status();
  ASSERT_EQ(exported[0]->files_size(), 1);
  const int64_t file_bytes = exported[0]->files(0).bytes();
  EXPECT_GT(file_bytes, 3 * kUnits * unit_bytes);  // Parameters + 2 states.
  struct stat st;
  ASSERT_EQ(stat(exported[0]->files(0).path().c_str(), &st), 0);
  EXPECT_EQ(st.st_size, file_bytes);
  const int64_t growth = peak - before;
  std::printf(
      "FULL export of %lld MiB (%d units of %lld MiB, parameters + AdamW "
      "state), W = F = 2 in one process: VmHWM before %lld MiB, peak %lld "
      "MiB, growth %.1f MiB = %.2f units (bound: 2 ranks x 3 units = %lld "
      "MiB)\n",
      static_cast<long long>(file_bytes / kMiB), kUnits,
      static_cast<long long>(unit_bytes / kMiB),
      static_cast<long long>(before / kMiB),
      static_cast<long long>(peak / kMiB), static_cast<double>(growth) / kMiB,
      static_cast<double>(growth) / unit_bytes,
      static_cast<long long>(6 * unit_bytes / kMiB));
  // Each rank holds the unit it gathers (and the gather's own transfer
  // buffer); the whole file would be 48 units.
  EXPECT_LE(growth, 6 * unit_bytes);
}

TEST_F(StateExportTest, FullExportReportsProgressOnEveryRank) {
  StartAndRegister(Model(8, 64));
  std::vector<pb::ExportProgress> seen[2];
  std::vector<std::thread> watchers;
  for (int r = 0; r < 2; ++r) {
    watchers.emplace_back([&, r] {
      const pb::WatchEventsRequest request;  // From a snapshot.
      (void)nodes_[r]->WatchEvents(
          request, MonoNow() + absl::Seconds(60),
          [&](const pb::TrainerEvent& event) {
            if (!event.has_export_progress()) return true;
            seen[r].push_back(event.export_progress());
            return !event.export_progress().done();
          },
          [] { return false; });
    });
  }
  const auto exported = Export(FullRequest("p.safetensors"));
  for (auto& t : watchers) t.join();
  ASSERT_TRUE(exported[0].ok()) << exported[0].status();
  const int64_t file_bytes = exported[0]->files(0).bytes();
  for (int r = 0; r < 2; ++r) {
    ASSERT_GE(seen[r].size(), 3u) << "rank " << r;
    int64_t previous = -1;
    for (const pb::ExportProgress& p : seen[r]) {
      EXPECT_EQ(p.bytes_total(), file_bytes) << "rank " << r;
      EXPECT_EQ(p.path(), absl::StrCat(dir_, "/p.safetensors"));
      EXPECT_GE(p.bytes_done(), previous);
      previous = p.bytes_done();
    }
    EXPECT_LT(seen[r].front().bytes_done(), file_bytes);
    EXPECT_TRUE(seen[r].back().done());
    EXPECT_EQ(seen[r].back().status(), "OK");
    EXPECT_EQ(seen[r].back().bytes_done(), file_bytes);
  }
}

// A write that fails (here the process's file size limit, EFBIG, as a full
// disk's ENOSPC) on rank 0: RESOURCE_EXHAUSTED naming the file, no partial
// file; rank 1 finishes its gathers instead of timing out, and ends with
// rank 0's outcome.
TEST_F(StateExportTest, FailedWriteLeavesNoFileAndPeersFinish) {
  StartAndRegister(Model(8, 256));  // 1 MiB a unit.
  signal(SIGXFSZ, SIG_IGN);
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit limited = saved;
  limited.rlim_cur = 2 * kMiB;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  const pb::ExportStateRequest request = FullRequest("big.safetensors");
  const MonoTime start = MonoNow();
  const auto exported = Export(request);
  const absl::Duration took = MonoNow() - start;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  EXPECT_EQ(exported[0].status().code(), absl::StatusCode::kResourceExhausted)
      << exported[0].status();
  EXPECT_TRUE(absl::StrContains(exported[0].status().message(), request.path()))
      << exported[0].status();
  EXPECT_EQ(exported[1].status().code(), absl::StatusCode::kResourceExhausted)
      << exported[1].status();
  EXPECT_TRUE(absl::StrContains(exported[1].status().message(),
                                "rank 0 did not write the file: "))
      << exported[1].status();
  EXPECT_LT(took, absl::Seconds(10)) << "a peer waited for its timeout";
  for (const std::string& e : Entries(dir_)) {
    EXPECT_FALSE(absl::StartsWith(e, "big.safetensors")) << e;
  }
  // The job goes on: the next export succeeds.
  const auto again = Export(FullRequest("again.safetensors"));
  EXPECT_TRUE(again[0].ok()) << again[0].status();
  EXPECT_TRUE(again[1].ok()) << again[1].status();
}

// The caller of rank 0 went away (shardctl interrupted): the writing
// stops, no file is left, and rank 1 still finishes its gathers and is
// told that nothing was written (not CANCELLED: its caller did not cancel,
// and must not retry an export rank 0's caller gave up).
TEST_F(StateExportTest, CancelledExportLeavesNoFileAndPeersFinish) {
  StartAndRegister(Model(4, 64));
  const pb::ExportStateRequest request = FullRequest("cancelled.safetensors");
  std::vector<absl::StatusOr<pb::ExportStateResponse>> out(
      2, absl::UnknownError("not called"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      out[r] = nodes_[r]->ExportState(request, MonoNow() + absl::Seconds(60),
                                      [r] { return r == 0; });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(out[0].status().code(), absl::StatusCode::kCancelled)
      << out[0].status();
  EXPECT_TRUE(absl::StrContains(out[0].status().message(), request.path()));
  EXPECT_EQ(out[1].status().code(), absl::StatusCode::kFailedPrecondition)
      << out[1].status();
  EXPECT_TRUE(absl::StrContains(out[1].status().message(),
                                "rank 0 did not write the file: "))
      << out[1].status();
  for (const std::string& e : Entries(dir_)) {
    EXPECT_FALSE(absl::StartsWith(e, "cancelled.safetensors")) << e;
  }
}

TEST_F(StateExportTest, FullExportWithoutItsPeerSaysWhatItRequires) {
  StartAndRegister(Model(2, 16), /*collective_timeout=*/absl::Seconds(2));
  const auto exported = Export(FullRequest("alone.safetensors"), {0});
  ASSERT_FALSE(exported[0].ok());
  // Refused before any gather (ExportRendezvous), naming the missing rank.
  EXPECT_EQ(exported[0].status().code(), absl::StatusCode::kFailedPrecondition)
      << exported[0].status();
  EXPECT_TRUE(absl::StrContains(exported[0].status().message(),
                                "rank 1 did not call ExportState"))
      << exported[0].status();
  for (const std::string& e : Entries(dir_)) {
    EXPECT_FALSE(absl::StartsWith(e, "alone.safetensors")) << e;
  }
}

TEST_F(StateExportTest, RejectsRelativePathAndMissingLayout) {
  pb::ExportStateRequest request;
  request.set_path("relative/file");
  request.set_layout(pb::EXPORT_LAYOUT_FULL);
  EXPECT_EQ(StateExport::CheckRequest(request).code(),
            absl::StatusCode::kInvalidArgument);
  request.set_path("/abs/file");
  request.clear_layout();
  EXPECT_EQ(StateExport::CheckRequest(request).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::node
