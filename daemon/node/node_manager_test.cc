#include "daemon/node/node_manager.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/core/mono_time.h"
#include "daemon/memory/cuda_ipc_name.h"
#include "daemon/memory/shm_allocator.h"
#include "daemon/node/coordinator_ports.h"
#include "daemon/node/cpu_engine_backend.h"
#include "daemon/node/testing/guarded_engine_backend.h"
#include "daemon/recovery/shard_stream.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

namespace pb = ::shardd::v1;

std::string TempDir() {
  std::string base = "/tmp/shardd-nm-XXXXXX";
  char* made = mkdtemp(base.data());
  EXPECT_NE(made, nullptr);
  return base;
}

pb::ModelSpec Model(pb::ShardingStrategy strategy, int f, int64_t rows = 4) {
  pb::ModelSpec spec;
  pb::UnitSpec* unit = spec.add_units();
  unit->set_name("layer0");
  pb::TensorSpec* w = unit->add_tensors();
  w->set_name("weight");
  w->add_shape(rows);
  w->add_shape(3);
  w->set_dtype(pb::DTYPE_FP32);
  w->mutable_init()->mutable_constant()->set_value(0.5f);
  pb::TensorSpec* b = unit->add_tensors();
  b->set_name("bias");
  b->add_shape(3);
  b->set_dtype(pb::DTYPE_FP32);
  pb::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(strategy);
  c->set_sharding_factor(f);
  c->set_max_gathered_units(1);
  pb::Sgd* sgd = c->mutable_optimizer()->mutable_sgd();
  sgd->set_lr(0.5);
  return spec;
}

// The 15 fp32 values (weight [4, 3], then bias [3]) of Model()'s layer0
// in a FULL export, after checking the weight's header entry; empty (and
// a test failure) when the file is not as expected.
std::vector<float> ReadFullExportOfLayer0(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, ' ');
  in.read(header.data(), header_len);
  EXPECT_TRUE(absl::StrContains(header,
                                "\"layer0.weight\":{\"dtype\":\"F32\","
                                "\"shape\":[4,3],\"data_offsets\":[0,48]}"))
      << header;
  std::vector<float> values(15);
  in.read(reinterpret_cast<char*>(values.data()), 60);
  if (!in.good()) return {};
  return values;
}

struct Cluster {
  std::unique_ptr<coordinator::InProcessCoordinator> coordinator;
  std::vector<std::unique_ptr<NodeManager>> nodes;
  std::string dir;
};

// Makes rank r's backend (null: the default CPU one).
using BackendFor = std::function<std::shared_ptr<EngineBackend>(int rank)>;

Cluster Start(int w, int f, const BackendFor& backend = nullptr,
              const std::string& commit_log_prefix = "") {
  Cluster c;
  c.dir = TempDir();
  coordinator::InProcessCoordinatorOptions co;
  co.coordinator.membership.world_size = w;
  co.coordinator.membership.sharding_factor = f;
  auto started = coordinator::InProcessCoordinator::Start(co);
  EXPECT_TRUE(started.ok()) << started.status();
  c.coordinator = std::move(*started);
  std::vector<absl::StatusOr<std::unique_ptr<NodeManager>>> made(w);
  std::vector<std::thread> threads;
  for (int r = 0; r < w; ++r) {
    threads.emplace_back([&, r] {
      NodeOptions o;
      UseCoordinator(c.coordinator->address(), nullptr, &o);
      o.identity = absl::StrCat("node-", r);
      o.rank = r;
      o.peer_address = absl::StrCat("127.0.0.1:", 1000 + r);  // Not probed.
      o.shm_dir = c.dir;
      o.shm_prefix = absl::StrCat("r", r);
      o.collective_timeout = absl::Seconds(10);
      o.connect_timeout = absl::Seconds(10);
      if (backend) o.backend = backend(r);
      if (!commit_log_prefix.empty()) {
        o.commit_log_path = absl::StrCat(commit_log_prefix, r);
      }
      made[r] = NodeManager::Start(o);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < w; ++r) {
    EXPECT_TRUE(made[r].ok()) << made[r].status();
    c.nodes.push_back(std::move(*made[r]));
  }
  return c;
}

TEST(ShmAllocatorTest, BuffersAreSharedMemoryFilesUnlinkedOnDestruction) {
  const std::string dir = TempDir();
  memory::ShmAllocator allocator(dir, "t");
  auto buffer = allocator.Allocate("unit0/gathered", 4096 + 3);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const std::string path = (*buffer)->name();
  EXPECT_TRUE(absl::StartsWith(path, dir + "/t.0.unit0_gathered")) << path;
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 4096 + 3);
  EXPECT_EQ((*buffer)->size(), 4096 + 3);
  (*buffer)->data()[4098] = 7;
  EXPECT_EQ(allocator.Allocate("x", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  buffer->reset();
  EXPECT_NE(stat(path.c_str(), &st), 0);
  rmdir(dir.c_str());
}

TEST(NodeManagerTest,
     DifferentModelsOnTwoRanksAreFailedPreconditionNamingTheField) {
  Cluster c = Start(2, 2);
  std::vector<absl::StatusOr<pb::RegisterModelResponse>> got(
      2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      pb::RegisterModelRequest request;
      *request.mutable_model() =
          Model(pb::SHARDING_STRATEGY_FULL_SHARD, 2, r == 0 ? 4 : 5);
      got[r] =
          c.nodes[r]->RegisterModel(request, MonoNow() + absl::Seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].status().code(), absl::StatusCode::kFailedPrecondition)
        << got[r].status();
    EXPECT_TRUE(absl::StrContains(got[r].status().message(),
                                  "units[0].tensors[0].shape"))
        << got[r].status();
    EXPECT_TRUE(absl::StrContains(got[r].status().message(),
                                  absl::StrCat("rank ", 1 - r)))
        << got[r].status();
    // Nothing was registered.
    EXPECT_FALSE(c.nodes[r]->GetStatus().registered());
  }
  c.nodes.clear();
  rmdir(c.dir.c_str());
}

// The CPU backend, except that what trainers map is named like a GPU
// buffer exported by CUDA IPC (host memory underneath), and the "GPU" has
// a PCI bus id: what NodeManager puts into a CudaIpcRef, without a GPU.
class IpcNamedBuffer : public memory::ByteBuffer {
 public:
  IpcNamedBuffer(std::unique_ptr<memory::ByteBuffer> inner, std::string name)
      : inner_(std::move(inner)), name_(std::move(name)) {}
  uint8_t* data() override { return inner_->data(); }
  int64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return name_; }

 private:
  std::unique_ptr<memory::ByteBuffer> inner_;
  std::string name_;
};

class IpcNamingAllocator : public memory::BufferAllocator {
 public:
  explicit IpcNamingAllocator(memory::BufferAllocator& inner) : inner_(inner) {}
  absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> Allocate(
      absl::string_view name, int64_t bytes) override {
    auto buffer = inner_.Allocate(name, bytes);
    if (!buffer.ok()) return buffer.status();
    std::string handle(memory::kCudaIpcHandleBytes, '\0');
    std::snprintf(handle.data(), handle.size(), "fake-%d", next_++);
    auto ipc = memory::FormatCudaIpcName(/*device=*/3, handle);
    if (!ipc.ok()) return ipc.status();
    return std::unique_ptr<memory::ByteBuffer>(
        std::make_unique<IpcNamedBuffer>(*std::move(buffer), *ipc));
  }

 private:
  memory::BufferAllocator& inner_;
  int next_ = 0;
};

class IpcNamingBackend : public CpuEngineBackend {
 public:
  IpcNamingBackend(std::string dir, std::string prefix)
      : CpuEngineBackend(std::move(dir), std::move(prefix)),
        shared_(CpuEngineBackend::shared()) {}
  memory::BufferAllocator& shared() override { return shared_; }
  std::string pci_bus_id() const override { return "0000:3b:00.0"; }

 private:
  IpcNamingAllocator shared_;
};

TEST(NodeManagerTest, CudaIpcRefsCarryTheDevicesPciBusId) {
  Cluster c = Start(1, 1, [](int r) -> std::shared_ptr<EngineBackend> {
    return std::make_shared<IpcNamingBackend>(
        "/dev/shm", absl::StrCat("ipcname-", getpid(), "-", r));
  });
  const MonoTime deadline = MonoNow() + absl::Seconds(20);
  pb::RegisterModelRequest reg;
  *reg.mutable_model() = Model(pb::SHARDING_STRATEGY_NO_SHARD, 1);
  ASSERT_TRUE(c.nodes[0]->RegisterModel(reg, deadline).ok());
  pb::GatherRequest g;
  g.set_unit(0);
  g.set_pass(pb::PASS_BACKWARD);
  auto gathered = c.nodes[0]->Gather(g, deadline);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  for (const pb::DataRef* ref :
       {&gathered->params(), &gathered->grad_buffer()}) {
    ASSERT_TRUE(ref->has_cuda_ipc()) << ref->DebugString();
    EXPECT_EQ(ref->cuda_ipc().device_ordinal(), 3);
    EXPECT_EQ(ref->cuda_ipc().pci_bus_id(), "0000:3b:00.0");
    EXPECT_EQ(ref->cuda_ipc().mem_handle().size(),
              static_cast<size_t>(memory::kCudaIpcHandleBytes));
  }
  c.nodes.clear();
  rmdir(c.dir.c_str());
}

// Communicators that cannot be built the first time (a peer unreachable
// during the rendezvous, a store error): rank 0's backend fails its first
// MakeCollective.
class FailsFirstRendezvousBackend : public CpuEngineBackend {
 public:
  using CpuEngineBackend::CpuEngineBackend;
  absl::StatusOr<std::unique_ptr<comm::Collective>> MakeCollective(
      const GroupSpec& spec, comm::Store& store) override {
    if (failures_left_.fetch_sub(1) > 0) {
      return absl::UnavailableError(
          "injected: the rendezvous with a peer failed");
    }
    return CpuEngineBackend::MakeCollective(spec, store);
  }

 private:
  std::atomic<int> failures_left_{1};
};

// The daemon whose communicators failed reports it, so that the
// coordinator starts a new epoch in which every member builds them again;
// nobody's lease runs out, so without the report the job would sit
// un-ready in that epoch for good.
TEST(NodeManagerTest, FailedRendezvousIsReportedAndTheNextEpochBecomesReady) {
  Cluster c = Start(2, 2, [](int r) -> std::shared_ptr<EngineBackend> {
    const std::string prefix = absl::StrCat("rdv-", getpid(), "-", r);
    if (r == 0) {
      return std::make_shared<FailsFirstRendezvousBackend>("/dev/shm", prefix);
    }
    return std::make_shared<CpuEngineBackend>("/dev/shm", prefix);
  });
  const MonoTime deadline = MonoNow() + absl::Seconds(30);
  pb::RegisterModelRequest reg;
  *reg.mutable_model() = Model(pb::SHARDING_STRATEGY_FULL_SHARD, 2);
  std::vector<absl::Status> registered(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      registered[r] = c.nodes[r]->RegisterModel(reg, deadline).status();
    });
  }
  for (auto& t : threads) t.join();
  // RegisterModel waits for a ready epoch (and exchanges the model over
  // the store), so both succeeding means the job became ready.
  EXPECT_TRUE(registered[0].ok()) << registered[0];
  EXPECT_TRUE(registered[1].ok()) << registered[1];
  const pb::GetStatusResponse s0 = c.nodes[0]->GetStatus();
  const pb::GetStatusResponse s1 = c.nodes[1]->GetStatus();
  EXPECT_TRUE(s0.ready());
  EXPECT_TRUE(s1.ready());
  EXPECT_EQ(s0.epoch(), s1.epoch());
  c.nodes.clear();
  rmdir(c.dir.c_str());
}

TEST(NodeManagerTest, NoShardTrainsWithInlineGradientsAndExportsFull) {
  Cluster c = Start(2, 1);
  std::vector<absl::Status> done(2);
  std::vector<std::vector<float>> params(2);
  std::vector<std::thread> threads;
  const MonoTime deadline = MonoNow() + absl::Seconds(30);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NodeManager& node = *c.nodes[r];
      auto fail = [&](absl::Status s) { done[r] = s; };
      pb::RegisterModelRequest reg;
      *reg.mutable_model() = Model(pb::SHARDING_STRATEGY_NO_SHARD, 1);
      auto registered = node.RegisterModel(reg, deadline);
      if (!registered.ok()) return fail(registered.status());
      for (int step = 1; step <= 2; ++step) {
        pb::GatherRequest g;
        g.set_unit(0);
        g.set_pass(pb::PASS_BACKWARD);
        auto gathered = node.Gather(g, deadline);
        if (!gathered.ok()) return fail(gathered.status());
        // Gradient of rank r: r + 1 everywhere; the average is 1.5.
        std::vector<float> grad(15, static_cast<float>(r + 1));
        pb::ReduceGradRequest rg;
        rg.set_unit(0);
        rg.mutable_grad()->set_dtype(pb::DTYPE_FP32);
        rg.mutable_grad()->set_byte_length(15 * 4);
        rg.mutable_grad()->set_inline_data(
            std::string(reinterpret_cast<const char*>(grad.data()), 60));
        auto reduced = node.ReduceGrad(rg, deadline);
        if (!reduced.ok()) return fail(reduced.status());
        // Reducing the same unit twice in a step is refused.
        auto twice = node.ReduceGrad(rg, deadline);
        if (twice.status().code() != absl::StatusCode::kFailedPrecondition) {
          return fail(absl::InternalError(
              absl::StrCat("second ReduceGrad: ", twice.status().ToString())));
        }
        pb::StepRequest sr;
        sr.set_step(step);
        auto still_gathered = node.Step(sr, deadline);
        if (still_gathered.status().code() !=
            absl::StatusCode::kFailedPrecondition) {
          return fail(absl::InternalError("Step with a gathered unit"));
        }
        pb::ReleaseRequest rel;
        rel.set_unit(0);
        if (auto s = node.Release(rel); !s.ok()) return fail(s.status());
        auto stepped = node.Step(sr, deadline);
        if (!stepped.ok()) return fail(stepped.status());
      }
      pb::ExportStateRequest ex;
      ex.set_path(absl::StrCat(c.dir, "/full.safetensors"));
      ex.set_layout(pb::EXPORT_LAYOUT_FULL);
      auto exported = node.ExportState(ex, deadline);
      if (!exported.ok()) return fail(exported.status());
      if (exported->files_size() != (r == 0 ? 1 : 0)) {
        return fail(absl::InternalError("wrong number of exported files"));
      }
      done[r] = absl::OkStatus();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(done[r].ok()) << done[r];
  // SGD lr 0.5, averaged gradient 1.5, two steps: 0.5 - 2 * 0.75 = -1.0
  // for the weight, 0 - 1.5 = -1.5 for the bias.
  std::vector<float> values =
      ReadFullExportOfLayer0(absl::StrCat(c.dir, "/full.safetensors"));
  ASSERT_EQ(values.size(), 15u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(values[i], -1.0f) << i;
  for (int i = 12; i < 15; ++i) EXPECT_EQ(values[i], -1.5f) << i;
  for (int r = 0; r < 2; ++r) {
    const pb::GetStatusResponse status = c.nodes[r]->GetStatus();
    EXPECT_EQ(status.committed_step(), 2);
    EXPECT_EQ(status.memory().held().total_bytes(),
              status.memory().planned().total_bytes());
  }
  std::remove(absl::StrCat(c.dir, "/full.safetensors").c_str());
  c.nodes.clear();
  rmdir(c.dir.c_str());
}

// FULL export writes the fp32 master parameters whatever the units'
// parameter dtype (the bf16 copies are what Gather hands out).
TEST(NodeManagerTest, FullExportOfBf16UnitsWritesTheFp32Masters) {
  Cluster c = Start(2, 2);
  std::vector<absl::Status> done(2);
  std::vector<std::thread> threads;
  const MonoTime deadline = MonoNow() + absl::Seconds(30);
  const std::string path = absl::StrCat(c.dir, "/bf16.safetensors");
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NodeManager& node = *c.nodes[r];
      pb::RegisterModelRequest reg;
      *reg.mutable_model() = Model(pb::SHARDING_STRATEGY_FULL_SHARD, 2);
      for (pb::TensorSpec& t :
           *reg.mutable_model()->mutable_units(0)->mutable_tensors()) {
        t.set_dtype(pb::DTYPE_BF16);
      }
      // 1/3 is not a bf16 value: the fp32 master keeps what bf16 rounds.
      reg.mutable_model()
          ->mutable_units(0)
          ->mutable_tensors(0)
          ->mutable_init()
          ->mutable_constant()
          ->set_value(1.0f / 3.0f);
      auto registered = node.RegisterModel(reg, deadline);
      if (!registered.ok()) {
        done[r] = registered.status();
        return;
      }
      pb::ExportStateRequest ex;
      ex.set_path(path);
      ex.set_layout(pb::EXPORT_LAYOUT_FULL);
      auto exported = node.ExportState(ex, deadline);
      done[r] = exported.ok() ? absl::OkStatus() : exported.status();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(done[r].ok()) << done[r];
  std::vector<float> values = ReadFullExportOfLayer0(path);
  ASSERT_EQ(values.size(), 15u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(values[i], 1.0f / 3.0f) << i;
  for (int i = 12; i < 15; ++i) EXPECT_EQ(values[i], 0.0f) << i;
  std::remove(path.c_str());
  c.nodes.clear();
  rmdir(c.dir.c_str());
}

// Two FULL_SHARD (W = F = 2) steps with inline gradients, then a full and
// a sharded export; the full export's values, the sharded file of rank 1
// and every rank's commit log.
struct Trained {
  absl::Status status;
  std::vector<float> full;
  std::string sharded_rank1;
  std::vector<std::string> commit_logs;
  // Rank 1's shard as Peer.FetchShard streams it (inline), assembled.
  std::string streamed_rank1;
};

// Streams `node`'s shard inline (as to a replacement) and assembles it.
absl::StatusOr<std::string> StreamShard(NodeManager& node, int shard_index) {
  const pb::GetStatusResponse status = node.GetStatus();
  pb::FetchShardRequest request;
  request.set_epoch(status.epoch());
  request.set_step(status.committed_step());
  request.set_shard_index(shard_index);
  request.set_max_chunk_bytes(16);  // Several chunks per section.
  std::vector<std::string> sections;
  recovery::ShardStreamAssembler assembler(
      [&](const pb::ShardHeader& header,
          int index) -> absl::StatusOr<uint8_t*> {
        sections.resize(header.sections_size());
        sections[index].resize(header.sections(index).byte_length());
        return reinterpret_cast<uint8_t*>(sections[index].data());
      });
  absl::Status added;
  const absl::Status served =
      node.ServeShard(request, MonoNow() + absl::Seconds(10),
                      [&](const pb::FetchShardResponse& msg) {
                        added = assembler.Add(msg);
                        return added.ok();
                      });
  if (!served.ok()) return served;
  if (!added.ok()) return added;
  if (absl::Status s = assembler.Finish(); !s.ok()) return s;
  std::string all;
  for (const std::string& b : sections) all += b;
  return all;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One inline-gradient step of Model() on `node` (gradient depends on the
// rank and the step).
absl::Status TrainStep(NodeManager& node, int rank, int step,
                       MonoTime deadline) {
  pb::GatherRequest g;
  g.set_unit(0);
  auto gathered = node.Gather(g, deadline);
  if (!gathered.ok()) return gathered.status();
  pb::ReleaseRequest rel;
  rel.set_unit(0);
  if (auto s = node.Release(rel); !s.ok()) return s.status();
  std::vector<float> grad(15);
  for (int i = 0; i < 15; ++i) grad[i] = 0.125f * (i % 5) + rank - step;
  pb::ReduceGradRequest rg;
  rg.set_unit(0);
  rg.mutable_grad()->set_dtype(pb::DTYPE_FP32);
  rg.mutable_grad()->set_byte_length(15 * 4);
  rg.mutable_grad()->set_inline_data(
      std::string(reinterpret_cast<const char*>(grad.data()), 60));
  auto reduced = node.ReduceGrad(rg, deadline);
  if (!reduced.ok()) return reduced.status();
  pb::StepRequest sr;
  sr.set_step(step);
  return node.Step(sr, deadline).status();
}

Trained TrainAndExport(const BackendFor& backend) {
  Trained out;
  const std::string logs = TempDir();
  Cluster c = Start(2, 2, backend, logs + "/commits-");
  std::vector<absl::Status> done(2);
  std::vector<std::thread> threads;
  const MonoTime deadline = MonoNow() + absl::Seconds(30);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NodeManager& node = *c.nodes[r];
      auto fail = [&](absl::Status s) { done[r] = s; };
      pb::RegisterModelRequest reg;
      *reg.mutable_model() = Model(pb::SHARDING_STRATEGY_FULL_SHARD, 2);
      auto registered = node.RegisterModel(reg, deadline);
      if (!registered.ok()) return fail(registered.status());
      for (int step = 1; step <= 2; ++step) {
        if (absl::Status s = TrainStep(node, r, step, deadline); !s.ok()) {
          return fail(s);
        }
      }
      pb::ExportStateRequest ex;
      ex.set_path(absl::StrCat(c.dir, "/full.safetensors"));
      ex.set_layout(pb::EXPORT_LAYOUT_FULL);
      auto exported = node.ExportState(ex, deadline);
      if (!exported.ok()) return fail(exported.status());
      pb::ExportStateRequest sharded;
      sharded.set_path(absl::StrCat(c.dir, "/sharded"));
      sharded.set_layout(pb::EXPORT_LAYOUT_SHARDED);
      auto written = node.ExportState(sharded, deadline);
      if (!written.ok()) return fail(written.status());
      if (r == 1) {
        absl::StatusOr<std::string> streamed = StreamShard(node, 1);
        if (!streamed.ok()) return fail(streamed.status());
        out.streamed_rank1 = *std::move(streamed);
      }
      done[r] = absl::OkStatus();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    if (!done[r].ok()) out.status = done[r];
  }
  if (out.status.ok()) {
    out.full = ReadFullExportOfLayer0(absl::StrCat(c.dir, "/full.safetensors"));
    out.sharded_rank1 =
        ReadFile(absl::StrCat(c.dir, "/sharded/rank-1.safetensors"));
  }
  c.nodes.clear();  // Closes the commit logs.
  for (int r = 0; r < 2; ++r) {
    const std::string log = absl::StrCat(logs, "/commits-", r);
    out.commit_logs.push_back(ReadFile(log));
    std::remove(log.c_str());
  }
  rmdir(logs.c_str());
  std::remove(absl::StrCat(c.dir, "/full.safetensors").c_str());
  for (int r = 0; r < 2; ++r) {
    std::remove(
        absl::StrCat(c.dir, "/sharded/rank-", r, ".safetensors").c_str());
  }
  rmdir(absl::StrCat(c.dir, "/sharded").c_str());
  rmdir(c.dir.c_str());
  return out;
}

// The daemon with its engine memory where the host cannot touch it, as a
// GPU's: gradients go in through the engine's math, commit-log checksums,
// the sharded export and a FetchShard stream come out through it, and the
// collectives move device buffers. Training ends exactly where the CPU
// backend's does.
TEST(NodeManagerTest, DeviceMemoryBackendTrainsLikeTheCpuBackendBitForBit) {
  const Trained cpu = TrainAndExport(nullptr);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  std::vector<std::shared_ptr<testing::GuardedEngineBackend>> backends;
  for (int r = 0; r < 2; ++r) {
    auto b = testing::GuardedEngineBackend::Create(int64_t{8} << 20);
    ASSERT_TRUE(b.ok()) << b.status();
    backends.push_back(*std::move(b));
  }
  const Trained device = TrainAndExport([&](int r) { return backends[r]; });
  ASSERT_TRUE(device.status.ok()) << device.status;
  ASSERT_EQ(cpu.full.size(), 15u);
  EXPECT_EQ(device.full, cpu.full);
  EXPECT_NE(cpu.full[0], 0.5f);  // Training moved the weight.
  EXPECT_FALSE(cpu.sharded_rank1.empty());
  EXPECT_EQ(device.sharded_rank1, cpu.sharded_rank1);
  // Parameters and optimizer state of shard 1 (SGD: parameters only).
  EXPECT_EQ(cpu.streamed_rank1.size(), 8u * 4);
  EXPECT_EQ(device.streamed_rank1, cpu.streamed_rank1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(cpu.commit_logs[r].empty()) << r;
    EXPECT_EQ(device.commit_logs[r], cpu.commit_logs[r]) << r;
    EXPECT_GT(backends[r]->math_calls(), 0) << r;
  }
}

// In-process Peer clients: a daemon's peer address names a live
// NodeManager of this test, and FetchShard/Probe call it directly.
class InProcessPeers {
 public:
  void Set(int rank, NodeManager* node) {
    absl::MutexLock lock(&mu_);
    nodes_[absl::StrCat("127.0.0.1:", 1000 + rank)] = node;
  }
  void Install(NodeOptions& o) {
    o.fetch_shard =
        [this](const std::string& address, const pb::FetchShardRequest& request,
               MonoTime deadline,
               const std::function<absl::Status(const pb::FetchShardResponse&)>&
                   on_message) {
          NodeManager* node = Find(address);
          if (node == nullptr) return absl::UnavailableError(address);
          absl::Status received;
          absl::Status served = node->ServeShard(
              request, deadline, [&](const pb::FetchShardResponse& msg) {
                received = on_message(msg);
                return received.ok();
              });
          return received.ok() ? served : received;
        };
    o.probe_peer =
        [this](const std::string& address, MonoTime,
               bool include_model) -> absl::StatusOr<pb::ProbeResponse> {
      NodeManager* node = Find(address);
      if (node == nullptr) return absl::UnavailableError(address);
      return node->Probe(include_model);
    };
    o.probe_peers = [this](const std::vector<std::string>& addresses,
                           MonoTime) {
      std::vector<absl::Status> out;
      for (const std::string& address : addresses) {
        out.push_back(Find(address) != nullptr
                          ? absl::OkStatus()
                          : absl::UnavailableError(address));
      }
      return out;
    };
  }

 private:
  NodeManager* Find(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(address);
    return it == nodes_.end() ? nullptr : it->second;
  }
  absl::Mutex mu_;
  std::map<std::string, NodeManager*> nodes_;
};

// A daemon with its shards in (guarded) device memory leaves after step 1;
// its replacement, also on device memory, copies the shard from its
// replica (the bytes device to device over the replica group, the CRCs
// through the engines' math), the trainer re-registers, and step 2 ends
// with the parameters of a run without the failure.
TEST(NodeManagerTest, DeviceMemoryReplacementCopiesItsShardFromAReplica) {
  auto model = [] {
    pb::RegisterModelRequest reg;
    *reg.mutable_model() = Model(pb::SHARDING_STRATEGY_HYBRID_SHARD, 1);
    return reg;
  };
  const std::string dir = TempDir();
  coordinator::InProcessCoordinatorOptions co;
  co.coordinator.membership.world_size = 2;
  co.coordinator.membership.sharding_factor = 1;
  auto coordinator = coordinator::InProcessCoordinator::Start(co);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  InProcessPeers peers;
  auto start = [&](int rank) -> absl::StatusOr<std::unique_ptr<NodeManager>> {
    auto backend = testing::GuardedEngineBackend::Create(int64_t{4} << 20);
    if (!backend.ok()) return backend.status();
    NodeOptions o;
    UseCoordinator((*coordinator)->address(), nullptr, &o);
    o.identity = absl::StrCat("node-", rank);
    o.rank = rank;
    o.peer_address = absl::StrCat("127.0.0.1:", 1000 + rank);
    o.shm_dir = dir;
    o.collective_timeout = absl::Seconds(10);
    o.connect_timeout = absl::Seconds(10);
    o.recovery_timeout = absl::Seconds(20);
    o.backend = *std::move(backend);
    peers.Install(o);
    return NodeManager::Start(o);
  };
  const MonoTime deadline = MonoNow() + absl::Seconds(60);
  std::vector<std::unique_ptr<NodeManager>> nodes(2);
  std::vector<absl::Status> done(2);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto node = start(r);
        if (!node.ok()) {
          done[r] = node.status();
          return;
        }
        nodes[r] = *std::move(node);
        peers.Set(r, nodes[r].get());
        auto registered = nodes[r]->RegisterModel(model(), deadline);
        done[r] = registered.ok() ? TrainStep(*nodes[r], r, 1, deadline)
                                  : registered.status();
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(done[r].ok()) << r << done[r];

  // Rank 1 goes; its replacement joins and recovers from rank 0.
  peers.Set(1, nullptr);
  ASSERT_TRUE(nodes[1]->Shutdown("test: replaced").ok());
  nodes[1].reset();
  {
    std::vector<std::thread> threads;
    threads.emplace_back([&] {
      auto node = start(1);
      if (!node.ok()) {
        done[1] = node.status();
        return;
      }
      nodes[1] = *std::move(node);
      peers.Set(1, nodes[1].get());
      // The trainer re-registers: once the copy is in, it attaches to the
      // recovered engine at step 1.
      auto registered = nodes[1]->RegisterModel(model(), deadline);
      if (!registered.ok()) {
        done[1] = registered.status();
        return;
      }
      if (!registered->reattached() || registered->committed_step() != 1) {
        done[1] = absl::InternalError(absl::StrCat(
            "replacement: reattached ", registered->reattached(), " at step ",
            registered->committed_step(), ", expected the recovered step 1"));
        return;
      }
      done[1] = TrainStep(*nodes[1], 1, 2, deadline);
    });
    threads.emplace_back([&] {
      pb::WaitReadyRequest wait;
      wait.set_min_epoch(nodes[0]->GetStatus().epoch() + 1);
      auto ready = nodes[0]->WaitReady(wait, deadline);
      done[0] =
          ready.ok() ? TrainStep(*nodes[0], 0, 2, deadline) : ready.status();
    });
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(done[r].ok()) << r << ": " << done[r];
  ASSERT_TRUE(done[0].ok() && done[1].ok());

  // The reference: the same two steps without a failure (CPU backend).
  Cluster ref = Start(2, 1);
  std::vector<absl::Status> ref_done(2);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto registered = ref.nodes[r]->RegisterModel(model(), deadline);
        absl::Status s = registered.status();
        for (int step = 1; s.ok() && step <= 2; ++step) {
          s = TrainStep(*ref.nodes[r], r, step, deadline);
        }
        ref_done[r] = s;
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ref_done[r].ok()) << ref_done[r];
  for (int r = 0; r < 2; ++r) {
    auto got = StreamShard(*nodes[r], 0);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = StreamShard(*ref.nodes[r], 0);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(*got, *want) << "rank " << r;
  }
  ref.nodes.clear();
  rmdir(ref.dir.c_str());
  nodes.clear();
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace shardd::node
