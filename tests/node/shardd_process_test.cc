// Process-level test of the shardd daemon: a coordinator (W = 2, F = 2) and
// two shardd processes on 127.0.0.1; the test acts as both trainers through
// gRPC stubs over the daemons' Unix sockets, writes gradients into the
// shared-memory gradient slots the daemons name, steps, and checks the
// parameters against a single-process unsharded reference bit for bit.
// Also: held memory equals the plan per category; malformed and oversize
// requests (over --max_message_mb, before and after registration) get clear
// statuses and leave GetStatus unchanged.
//
//   shardd_process_test COORDINATOR_BINARY SHARDD_BINARY

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/adamw.h"
#include "daemon/core/grad_clip.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/testing/subprocess.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.grpc.pb.h"
#include "shardd/v1/peer.grpc.pb.h"
#include "shardd/v1/trainer.grpc.pb.h"
#include "tests/coordinator/port_holder.h"
#include "tests/fuzz/generic_call.h"
#include "tests/fuzz/hostile_message.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;
using memory::SharedMemorySegment;

std::string g_coordinator_binary;
std::string g_shardd_binary;
std::string g_shardctl_binary;

constexpr int kW = 2;
constexpr int kSteps = 3;
constexpr double kLr = 0.01;
constexpr double kMaxGradNorm = 0.25;
// The daemons' gRPC receive limit; the oversize requests send twice that.
constexpr int kMaxMessageMb = 1;
const std::string kOversize(2 * kMaxMessageMb * 1024 * 1024, '\0');

// Unit 0: weight [3, 5] + bias [3] (18 elements); unit 1: weight [5]
// (5 elements, padded to 6 over F = 2).
const std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>>
    kUnits = {{{"weight", {3, 5}}, {"bias", {3}}}, {{"weight", {5}}}};

int64_t UnitNumel(int u) {
  int64_t n = 0;
  for (const auto& [name, shape] : kUnits[u]) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    n += k;
  }
  return n;
}

float InitValue(int unit, int64_t i) {
  return 0.25f * static_cast<float>((i % 7) - 3) + 0.125f * unit;
}

// Multiples of 1/8: every sum and average is exact in fp32, so the sharded
// run must equal the reference bit for bit.
float GradValue(int rank, int step, int unit, int64_t i) {
  return static_cast<float>(((rank * 7 + step * 3 + unit * 5 + i) % 17) - 8) /
         8.0f;
}

pb::ModelSpec Model(double lr = kLr) {
  pb::ModelSpec spec;
  for (size_t u = 0; u < kUnits.size(); ++u) {
    pb::UnitSpec* unit = spec.add_units();
    unit->set_name(absl::StrCat("layer", u));
    int64_t offset = 0;
    for (const auto& [name, shape] : kUnits[u]) {
      pb::TensorSpec* t = unit->add_tensors();
      t->set_name(name);
      int64_t n = 1;
      for (int64_t d : shape) {
        t->add_shape(d);
        n *= d;
      }
      t->set_dtype(pb::DTYPE_FP32);
      std::vector<float> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = InitValue(u, offset + i);
      t->mutable_init()->mutable_values()->set_data(std::string(
          reinterpret_cast<const char*>(values.data()), n * sizeof(float)));
      offset += n;
    }
  }
  pb::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(pb::SHARDING_STRATEGY_FULL_SHARD);
  c->set_sharding_factor(kW);
  c->set_max_gathered_units(1);
  c->set_max_grad_norm(kMaxGradNorm);
  pb::AdamW* a = c->mutable_optimizer()->mutable_adamw();
  a->set_lr(lr);
  a->set_beta1(0.9);
  a->set_beta2(0.999);
  a->set_eps(1e-8);
  a->set_weight_decay(0.01);
  return spec;
}

// The reference's parameters and AdamW state after kSteps.
struct ReferenceState {
  std::vector<std::vector<float>> params, m, v;
};

ReferenceState ReferenceWithState() {
  std::vector<std::vector<float>> params, m, v;
  for (size_t u = 0; u < kUnits.size(); ++u) {
    const int64_t n = UnitNumel(u);
    params.emplace_back(n);
    for (int64_t i = 0; i < n; ++i) params[u][i] = InitValue(u, i);
    m.emplace_back(n, 0.0f);
    v.emplace_back(n, 0.0f);
  }
  core::AdamWOptions o;
  o.lr = kLr;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.weight_decay = 0.01;
  auto adamw = *core::AdamW::Create(o);
  auto clipper = *core::GradClipper::Create(kMaxGradNorm);
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<float>> grads;
    core::GradNormPartial partial;
    for (size_t u = 0; u < params.size(); ++u) {
      std::vector<float> g(params[u].size());
      for (size_t i = 0; i < g.size(); ++i) {
        float sum = 0;
        for (int r = 0; r < kW; ++r) sum += GradValue(r, step, u, i);
        g[i] = sum / static_cast<float>(kW);
      }
      EXPECT_TRUE(
          core::GradClipper::Accumulate(g.data(), g.size(), &partial).ok());
      grads.push_back(std::move(g));
    }
    const std::vector<core::GradNormPartial> partials = {partial};
    auto clip = clipper.Finish(partials);
    EXPECT_TRUE(clip.ok());
    for (size_t u = 0; u < params.size(); ++u) {
      EXPECT_TRUE(adamw
                      .Update(step, clip->scale, grads[u].data(),
                              params[u].data(), m[u].data(), v[u].data(),
                              params[u].size(), core::DType::kFloat32, nullptr)
                      .ok());
    }
  }
  return ReferenceState{std::move(params), std::move(m), std::move(v)};
}

std::vector<std::vector<float>> Reference() {
  return ReferenceWithState().params;
}

// The F32 tensors of a safetensors file by name (our writer's layout:
// "NAME":{"dtype":"F32","shape":[...],"data_offsets":[A,B]}), and its
// header text.
absl::StatusOr<std::map<std::string, std::vector<float>>> ReadSafetensors(
    const std::string& path, std::string* header_out = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return absl::NotFoundError(path);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, ' ');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  const std::string data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  std::map<std::string, std::vector<float>> out;
  const std::regex entry(
      "\"([^\"]+)\":\\{\"dtype\":\"F32\",\"shape\":\\[[0-9,]*\\],"
      "\"data_offsets\":\\[([0-9]+),([0-9]+)\\]\\}");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), entry);
       it != std::sregex_iterator(); ++it) {
    const size_t a = std::stoull((*it)[2]), b = std::stoull((*it)[3]);
    if (b > data.size() || a > b || (b - a) % 4 != 0) {
      return absl::DataLossError(absl::StrCat(path, ": bad offsets"));
    }
    std::vector<float> values((b - a) / 4);
    std::memcpy(values.data(), data.data() + a, b - a);
    out[(*it)[1]] = std::move(values);
  }
  if (header_out != nullptr) *header_out = header;
  return out;
}

// The daemon's held memory, per category, equals the plan to the byte.
void ExpectHeldEqualsPlanned(const pb::MemoryReport& m) {
  EXPECT_GT(m.held().parameter_shard_bytes(), 0);
  EXPECT_GT(m.held().optimizer_state_bytes(), 0);
  EXPECT_EQ(m.held().DebugString(), m.planned().DebugString());
}

std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoSeconds(timeout));
  return ctx;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  return out;
}

void RemoveTree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : ListDir(path)) {
      RemoveTree(path + "/" + name);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

class ShardProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short paths: Unix socket paths are limited to 108 bytes.
    char tmpl[] = "/tmp/shardd-test-XXXXXX";
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
    // "coordinator listening on HOST:PORT (...)".
    std::string rest = line->substr(line->find(" on ") + 4);
    address_ = rest.substr(0, rest.find(' '));
    for (int r = 0; r < kW; ++r) {
      sockets_.push_back(absl::StrCat(dir_, "/r", r, ".sock"));
      auto d = Subprocess::Spawn(
          {g_shardd_binary, absl::StrCat("--coordinator=", address_),
           absl::StrCat("--identity=node-", r), absl::StrCat("--rank=", r),
           absl::StrCat("--shm_dir=", shm_dir_),
           absl::StrCat("--listen_unix=", sockets_[r]),
           "--peer_listen=127.0.0.1:0", "--collective_timeout_ms=20000",
           absl::StrCat("--max_message_mb=", kMaxMessageMb)},
          absl::StrCat("shardd-", r));
      ASSERT_TRUE(d.ok()) << d.status();
      daemons_.push_back(std::move(*d));
    }
    for (int r = 0; r < kW; ++r) {
      auto ready = daemons_[r]->WaitForLine("shardd rank", deadline);
      ASSERT_TRUE(ready.ok()) << ready.status();
      EXPECT_TRUE(absl::StrContains(*ready, absl::StrCat("rank ", r)));
      // "... peer HOST:PORT".
      std::string peer = ready->substr(ready->find(" peer ") + 6);
      peers_.push_back(peer.substr(0, peer.find_first_of(" \n")));
      auto channel =
          grpc::CreateChannel(absl::StrCat("unix:", sockets_[r]),
                              grpc::experimental::LocalCredentials(UDS));
      stubs_.push_back(pb::Trainer::NewStub(channel));
    }
  }

  // ExportState is collective: `request` on every rank at once.
  std::vector<grpc::Status> ExportOnEveryRank(
      const pb::ExportStateRequest& request,
      std::vector<pb::ExportStateResponse>* responses = nullptr) {
    std::vector<grpc::Status> statuses(kW);
    std::vector<pb::ExportStateResponse> replies(kW);
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] {
        statuses[r] = stubs_[r]->ExportState(Ctx(absl::Seconds(10)).get(),
                                             request, &replies[r]);
      });
    }
    for (auto& t : threads) t.join();
    if (responses != nullptr) *responses = std::move(replies);
    return statuses;
  }

  // grpc.health.v1 Check of `service` at `address`, without generated
  // stubs: 1 SERVING, 2 NOT_SERVING, 0 UNKNOWN, -1 the call failed.
  static int Health(const std::string& address, const std::string& service) {
    grpc::GenericStub stub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    std::string request_bytes;
    if (!service.empty()) {
      request_bytes =
          absl::StrCat("\x0a", std::string(1, service.size()), service);
    }
    grpc::Slice slice(request_bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&context, "/grpc.health.v1.Health/Check",
                   grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(10)) ||
        !status.ok()) {
      return -1;
    }
    std::vector<grpc::Slice> slices;
    if (!response.Dump(&slices).ok()) return -1;
    std::string bytes;
    for (const grpc::Slice& part : slices) {
      bytes.append(reinterpret_cast<const char*>(part.begin()), part.size());
    }
    return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
  }

  void TearDown() override {
    stubs_.clear();
    daemons_.clear();  // SIGKILLs whatever still runs.
    coordinator_.reset();
    if (!dir_.empty()) RemoveTree(dir_);
  }

  grpc::Status Register(int r, pb::RegisterModelResponse* response,
                        const pb::ModelSpec& model = Model()) {
    pb::RegisterModelRequest request;
    *request.mutable_model() = model;
    request.set_transport(pb::TRANSPORT_SHARED_MEMORY);
    return stubs_[r]->RegisterModel(Ctx(absl::Seconds(30)).get(), request,
                                    response);
  }

  // RegisterModel on every rank at once (it waits for every rank); each
  // rank's status, and its response in `responses`.
  std::vector<grpc::Status> RegisterOnEveryRank(
      std::vector<pb::RegisterModelResponse>* responses) {
    responses->assign(kW, pb::RegisterModelResponse());
    std::vector<grpc::Status> statuses(kW);
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back(
          [&, r] { statuses[r] = Register(r, &(*responses)[r]); });
    }
    for (auto& t : threads) t.join();
    return statuses;
  }

  pb::GetStatusResponse Status(int r) {
    pb::GetStatusResponse status;
    grpc::Status s = stubs_[r]->GetStatus(Ctx(absl::Seconds(5)).get(),
                                          pb::GetStatusRequest(), &status);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return status;
  }

  // A RegisterModel and a ReduceGrad whose inline bytes exceed the receive
  // limit: RESOURCE_EXHAUSTED, and GetStatus is the same before and after.
  void ExpectOversizeRejected(int r) {
    const pb::GetStatusResponse before = Status(r);
    pb::ModelSpec big = Model();
    big.mutable_units(0)
        ->mutable_tensors(0)
        ->mutable_init()
        ->mutable_values()
        ->set_data(kOversize);
    pb::RegisterModelResponse reg;
    grpc::Status s = Register(r, &reg, big);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
    pb::ReduceGradRequest grad;
    grad.set_unit(0);
    grad.mutable_grad()->set_dtype(pb::DTYPE_FP32);
    grad.mutable_grad()->set_byte_length(kOversize.size());
    grad.mutable_grad()->set_inline_data(kOversize);
    pb::ReduceGradResponse rr;
    s = stubs_[r]->ReduceGrad(Ctx(absl::Seconds(5)).get(), grad, &rr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
    EXPECT_EQ(StateOf(Status(r)), StateOf(before));
  }

  // GetStatus without what background peer probes change on their own
  // (they run on a timer, so one may land between two calls).
  static std::string StateOf(pb::GetStatusResponse status) {
    for (pb::PeerReachabilityStatus& peer : *status.mutable_peers()) {
      peer.clear_probes_answered();
      peer.clear_consecutive_failures();
      peer.clear_last_error();
    }
    return status.DebugString();
  }

  grpc::Status Gather(int r, int unit, pb::Pass pass,
                      pb::GatherResponse* response) {
    pb::GatherRequest request;
    request.set_unit(unit);
    request.set_pass(pass);
    return stubs_[r]->Gather(Ctx(absl::Seconds(30)).get(), request, response);
  }

  grpc::Status Release(int r, int unit, pb::ReleaseResponse* response) {
    pb::ReleaseRequest request;
    request.set_unit(unit);
    return stubs_[r]->Release(Ctx(absl::Seconds(5)).get(), request, response);
  }

  grpc::Status Step(int r, int64_t step, pb::StepResponse* response) {
    pb::StepRequest request;
    request.set_step(step);
    return stubs_[r]->Step(Ctx(absl::Seconds(30)).get(), request, response);
  }

  // One trainer's training loop; returns the first error.
  absl::Status Train(int r) {
    for (int step = 1; step <= kSteps; ++step) {
      for (int u = 0; u < 2; ++u) {
        pb::GatherResponse g;
        grpc::Status s = Gather(r, u, pb::PASS_FORWARD, &g);
        if (!s.ok()) return absl::InternalError(s.error_message());
        pb::ReleaseResponse rel;
        s = Release(r, u, &rel);
        if (!s.ok()) return absl::InternalError(s.error_message());
      }
      for (int u = 1; u >= 0; --u) {
        pb::GatherResponse g;
        grpc::Status s = Gather(r, u, pb::PASS_BACKWARD, &g);
        if (!s.ok()) return absl::InternalError(s.error_message());
        if (!g.has_grad_buffer()) return absl::InternalError("no grad_buffer");
        const pb::SharedMemoryRef& ref = g.grad_buffer().shared_memory();
        {
          auto seg = SharedMemorySegment::Open(
              ref.path(), ref.segment_bytes(),
              SharedMemorySegment::Access::kReadWrite);
          if (!seg.ok()) return seg.status();
          float* out = reinterpret_cast<float*>(
              static_cast<uint8_t*>(seg->mutable_data()) + ref.byte_offset());
          for (int64_t i = 0; i < UnitNumel(u); ++i) {
            out[i] = GradValue(r, step, u, i);
          }
        }
        pb::ReduceGradRequest request;
        request.set_unit(u);
        *request.mutable_grad() = g.grad_buffer();
        pb::ReduceGradResponse reduced;
        s = stubs_[r]->ReduceGrad(Ctx(absl::Seconds(30)).get(), request,
                                  &reduced);
        if (!s.ok()) return absl::InternalError(s.error_message());
        pb::ReleaseResponse rel;
        s = Release(r, u, &rel);
        if (!s.ok()) return absl::InternalError(s.error_message());
      }
      pb::StepResponse sr;
      grpc::Status s = Step(r, step, &sr);
      if (!s.ok()) return absl::InternalError(s.error_message());
      if (sr.committed_step() != step) {
        return absl::InternalError(
            absl::StrCat("committed ", sr.committed_step()));
      }
    }
    return absl::OkStatus();
  }

  // Gathers every unit and copies its real elements out of shared memory.
  absl::Status ReadParams(int r, std::vector<std::vector<float>>* out) {
    for (int u = 0; u < 2; ++u) {
      pb::GatherResponse g;
      grpc::Status s = Gather(r, u, pb::PASS_FORWARD, &g);
      if (!s.ok()) return absl::InternalError(s.error_message());
      const pb::SharedMemoryRef& ref = g.params().shared_memory();
      auto seg =
          SharedMemorySegment::Open(ref.path(), ref.segment_bytes(),
                                    SharedMemorySegment::Access::kReadOnly);
      if (!seg.ok()) return seg.status();
      const float* p = reinterpret_cast<const float*>(
          static_cast<const uint8_t*>(seg->data()) + ref.byte_offset());
      out->emplace_back(p, p + UnitNumel(u));
      pb::ReleaseResponse rel;
      s = Release(r, u, &rel);
      if (!s.ok()) return absl::InternalError(s.error_message());
    }
    return absl::OkStatus();
  }

  std::string dir_, shm_dir_, address_;
  std::vector<std::string> sockets_;
  std::vector<std::string> peers_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> daemons_;
  std::vector<std::unique_ptr<pb::Trainer::Stub>> stubs_;
};

TEST_F(ShardProcessTest, TwoDaemonsTrainBitExactAndShutDownClean) {
  // Socket mode 0600.
  for (const std::string& s : sockets_) {
    struct stat st;
    ASSERT_EQ(stat(s.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << s;
  }

  // Before registration.
  {
    pb::GatherResponse g;
    EXPECT_EQ(Gather(0, 0, pb::PASS_FORWARD, &g).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    pb::StepResponse sr;
    EXPECT_EQ(Step(0, 1, &sr).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    pb::GetStatusResponse status;
    ASSERT_TRUE(stubs_[0]
                    ->GetStatus(Ctx(absl::Seconds(5)).get(),
                                pb::GetStatusRequest(), &status)
                    .ok());
    EXPECT_FALSE(status.registered());
    // Oversize requests leave the unregistered daemon as it was, once its
    // epoch is ready (GetStatus polled until then, with a deadline).
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!Status(0).ready() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(Status(0).ready());
    ExpectOversizeRejected(0);
    EXPECT_FALSE(Status(0).registered());
  }

  // Register on both ranks at once (RegisterModel waits for every rank).
  std::vector<pb::RegisterModelResponse> reg;
  const std::vector<grpc::Status> reg_status = RegisterOnEveryRank(&reg);
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(reg_status[r].ok())
        << r << ": " << reg_status[r].error_message();
    EXPECT_EQ(reg[r].committed_step(), 0);
    EXPECT_FALSE(reg[r].reattached());
    EXPECT_EQ(reg[r].topology().world_size(), kW);
    EXPECT_EQ(reg[r].topology().sharding_factor(), kW);
    ExpectHeldEqualsPlanned(reg[r].memory());
    EXPECT_GT(reg[r].memory().planned().total_bytes(), 0);
  }
  EXPECT_EQ(reg[0].model_fingerprint(), reg[1].model_fingerprint());

  // Malformed requests: documented codes, nothing changes.
  {
    pb::GatherResponse g;
    EXPECT_EQ(Gather(0, 7, pb::PASS_FORWARD, &g).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    pb::StepResponse sr;
    grpc::Status s = Step(0, 1, &sr);  // No gradients yet.
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_TRUE(absl::StrContains(s.error_message(), "not reduced"))
        << s.error_message();
    EXPECT_EQ(Step(0, 5, &sr).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    pb::ReleaseResponse rel;
    ASSERT_TRUE(Release(0, 1, &rel).ok());  // Double/never-gathered release.
    EXPECT_FALSE(rel.was_gathered());
    EXPECT_EQ(Release(0, 9, &rel).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    pb::ReduceGradRequest bad;
    bad.set_unit(0);
    bad.mutable_grad()->set_dtype(pb::DTYPE_FP32);
    bad.mutable_grad()->set_byte_length(3);
    bad.mutable_grad()->set_inline_data("abc");
    pb::ReduceGradResponse rr;
    s = stubs_[0]->ReduceGrad(Ctx(absl::Seconds(5)).get(), bad, &rr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(absl::StrContains(s.error_message(), "grad.byte_length"))
        << s.error_message();
    ExpectOversizeRejected(0);
    // A different model on a daemon that holds one.
    pb::RegisterModelResponse other;
    s = Register(0, &other, Model(0.5));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_TRUE(absl::StrContains(s.error_message(), "lr"))
        << s.error_message();
    // The same model again: a restarted trainer re-attaches.
    ASSERT_TRUE(Register(1, &other).ok());
    EXPECT_TRUE(other.reattached());
    EXPECT_EQ(other.committed_step(), 0);
  }

  // Train on both ranks.
  std::vector<absl::Status> trained(kW);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] { trained[r] = Train(r); });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < kW; ++r) ASSERT_TRUE(trained[r].ok()) << trained[r];

  // Step is idempotent for the committed step.
  {
    pb::StepResponse sr;
    ASSERT_TRUE(Step(0, kSteps, &sr).ok());
    EXPECT_TRUE(sr.already_committed());
    EXPECT_EQ(sr.committed_step(), kSteps);
  }

  std::vector<std::vector<std::vector<float>>> params(kW);
  std::vector<absl::Status> read(kW);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] { read[r] = ReadParams(r, &params[r]); });
    }
    for (auto& t : threads) t.join();
  }
  const auto reference = Reference();
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(read[r].ok()) << read[r];
    ASSERT_EQ(params[r].size(), reference.size());
    for (size_t u = 0; u < reference.size(); ++u) {
      ASSERT_EQ(params[r][u].size(), reference[u].size());
      EXPECT_EQ(std::memcmp(params[r][u].data(), reference[u].data(),
                            reference[u].size() * sizeof(float)),
                0)
          << "rank " << r << " unit " << u << ": " << params[r][u][0] << " vs "
          << reference[u][0];
      // The parameters moved.
      EXPECT_NE(params[r][u][1], InitValue(u, 1));
    }
  }

  for (int r = 0; r < kW; ++r) {
    pb::GetStatusResponse status;
    ASSERT_TRUE(stubs_[r]
                    ->GetStatus(Ctx(absl::Seconds(5)).get(),
                                pb::GetStatusRequest(), &status)
                    .ok());
    EXPECT_TRUE(status.registered());
    EXPECT_TRUE(status.ready());
    EXPECT_EQ(status.rank(), r);
    EXPECT_EQ(status.committed_step(), kSteps);
    ExpectHeldEqualsPlanned(status.memory());
    EXPECT_EQ(status.gathered_units_size(), 0);
    int64_t all_gathers = 0;
    for (const pb::CollectiveStats& c : status.collectives()) {
      if (c.kind() == pb::COLLECTIVE_KIND_ALL_GATHER &&
          c.group() == pb::PROCESS_GROUP_SHARD) {
        all_gathers += c.calls();
      }
    }
    EXPECT_GT(all_gathers, 0);
  }

  // Sharded export on both ranks.
  {
    pb::ExportStateRequest request;
    request.set_path(dir_ + "/export");
    request.set_layout(pb::EXPORT_LAYOUT_SHARDED);
    std::vector<pb::ExportStateResponse> responses(kW);
    const std::vector<grpc::Status> exported =
        ExportOnEveryRank(request, &responses);
    for (int r = 0; r < kW; ++r) {
      ASSERT_TRUE(exported[r].ok()) << exported[r].error_message();
      ASSERT_EQ(responses[r].files_size(), 1);
      EXPECT_EQ(responses[r].step(), kSteps);
      struct stat st;
      ASSERT_EQ(stat(responses[r].files(0).path().c_str(), &st), 0);
      EXPECT_EQ(st.st_size, responses[r].files(0).bytes());
    }
  }

  // Both layouts with the optimizer state: AdamW's exp_avg and exp_avg_sq
  // equal the reference's bit for bit (sharded: the ranks' shards in rank
  // order make the unit), with the step in the metadata.
  {
    const ReferenceState ref = ReferenceWithState();
    const std::string sharded_dir = dir_ + "/export-opt";
    const std::string full_path = dir_ + "/full-opt.safetensors";
    for (const pb::ExportLayout layout :
         {pb::EXPORT_LAYOUT_SHARDED, pb::EXPORT_LAYOUT_FULL}) {
      pb::ExportStateRequest request;
      request.set_path(layout == pb::EXPORT_LAYOUT_FULL ? full_path
                                                        : sharded_dir);
      request.set_layout(layout);
      request.set_include_optimizer_state(true);
      for (const grpc::Status& status : ExportOnEveryRank(request)) {
        ASSERT_TRUE(status.ok()) << status.error_message();
      }
    }
    std::string header;
    auto full = ReadSafetensors(full_path, &header);
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(absl::StrContains(header, "\"optimizer\":\"adamw\""));
    EXPECT_TRUE(absl::StrContains(
        header, absl::StrCat("\"optimizer_step\":\"", kSteps, "\"")));
    std::vector<std::map<std::string, std::vector<float>>> shards;
    for (int r = 0; r < kW; ++r) {
      auto read = ReadSafetensors(
          absl::StrCat(sharded_dir, "/rank-", r, ".safetensors"));
      ASSERT_TRUE(read.ok()) << read.status();
      shards.push_back(*std::move(read));
    }
    for (size_t u = 0; u < kUnits.size(); ++u) {
      const std::string unit = absl::StrCat("layer", u);
      for (const auto& [kind, expected] :
           {std::pair{"exp_avg", &ref.m[u]},
            std::pair{"exp_avg_sq", &ref.v[u]}}) {
        // FULL: per tensor, in the unit's order.
        std::vector<float> joined;
        for (const auto& [tensor, shape] : kUnits[u]) {
          const std::string name = absl::StrCat(unit, ".", tensor, ".", kind);
          ASSERT_EQ(full->count(name), 1u) << name;
          joined.insert(joined.end(), (*full)[name].begin(),
                        (*full)[name].end());
        }
        ASSERT_EQ(joined.size(), expected->size()) << unit << " " << kind;
        EXPECT_EQ(std::memcmp(joined.data(), expected->data(),
                              joined.size() * sizeof(float)),
                  0)
            << "FULL " << unit << " " << kind;
        // SHARDED: rank 0's shard, then rank 1's.
        std::vector<float> concatenated;
        for (int r = 0; r < kW; ++r) {
          const std::string name = absl::StrCat(unit, ".", kind);
          ASSERT_EQ(shards[r].count(name), 1u) << name << " rank " << r;
          concatenated.insert(concatenated.end(), shards[r][name].begin(),
                              shards[r][name].end());
        }
        ASSERT_EQ(concatenated.size(), expected->size());
        EXPECT_EQ(std::memcmp(concatenated.data(), expected->data(),
                              concatenated.size() * sizeof(float)),
                  0)
            << "SHARDED " << unit << " " << kind;
        // The state moved.
        EXPECT_NE((*expected)[0], 0.0f);
      }
    }
  }

  // The daemons' segments live in shm_dir while they run.
  EXPECT_FALSE(ListDir(shm_dir_).empty());

  // SIGTERM: exit 0, segments and sockets removed.
  stubs_.clear();
  for (int r = 0; r < kW; ++r) daemons_[r]->Signal(SIGTERM);
  for (int r = 0; r < kW; ++r) {
    auto code = daemons_[r]->Wait(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "rank " << r;
    struct stat st;
    EXPECT_NE(lstat(sockets_[r].c_str(), &st), 0) << sockets_[r];
  }
  EXPECT_TRUE(ListDir(shm_dir_).empty())
      << "left behind: "
      << (ListDir(shm_dir_).empty() ? "" : ListDir(shm_dir_)[0]);
}

TEST_F(ShardProcessTest,
       KilledPeerAbortsTheSurvivorsCollectivesWithinTheDeadline) {
  std::vector<pb::RegisterModelResponse> reg(kW);
  std::vector<grpc::Status> reg_status(kW);
  std::vector<absl::Status> trained(kW);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] {
        reg_status[r] = Register(r, &reg[r]);
        if (reg_status[r].ok()) trained[r] = Train(r);
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(reg_status[r].ok()) << reg_status[r].error_message();
    ASSERT_TRUE(trained[r].ok()) << trained[r];
  }
  daemons_[1]->Signal(SIGKILL);
  ASSERT_TRUE(daemons_[1]->Wait(absl::Now() + absl::Seconds(5)).ok());
  // The parameters changed since the last gather, so this needs the dead
  // peer: ABORTED (communicator failed, or the epoch moved on), never a hang.
  const absl::Time start = absl::Now();
  pb::GatherResponse g;
  grpc::Status s = Gather(0, 0, pb::PASS_FORWARD, &g);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
  // Not ready again while the peer is gone.
  pb::WaitReadyRequest wait;
  pb::WaitReadyResponse waited;
  s = stubs_[0]->WaitReady(Ctx(absl::Seconds(1)).get(), wait, &waited);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_message();
  pb::GetStatusResponse status;
  ASSERT_TRUE(stubs_[0]
                  ->GetStatus(Ctx(absl::Seconds(5)).get(),
                              pb::GetStatusRequest(), &status)
                  .ok());
  EXPECT_FALSE(status.ready());
  EXPECT_EQ(status.committed_step(), kSteps);
  stubs_.clear();
  daemons_[0]->Signal(SIGTERM);
  auto code = daemons_[0]->Wait(absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

// SIGTERM while a trainer waits for a ready epoch that cannot come (its
// peer is dead): the wait ends at once with UNAVAILABLE and the daemon
// exits, instead of the server's drain waiting for the call's own deadline
// (two minutes here).
TEST_F(ShardProcessTest, ShutdownDoesNotWaitForAPendingWaitReady) {
  std::vector<pb::RegisterModelResponse> reg(kW);
  std::vector<grpc::Status> reg_status(kW);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] { reg_status[r] = Register(r, &reg[r]); });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(reg_status[r].ok()) << reg_status[r].error_message();
  }
  daemons_[1]->Signal(SIGKILL);
  ASSERT_TRUE(daemons_[1]->Wait(absl::Now() + absl::Seconds(5)).ok());
  pb::WaitReadyRequest wait;
  wait.set_min_epoch(Status(0).epoch() + 1000);  // Never reached.
  pb::WaitReadyResponse waited;
  grpc::Status waited_status;
  auto ctx = Ctx(absl::Seconds(120));
  std::thread waiter(
      [&] { waited_status = stubs_[0]->WaitReady(ctx.get(), wait, &waited); });
  // A call sent after the WaitReady on the same connection: once it is
  // answered, the WaitReady has reached the daemon.
  Status(0);
  const absl::Time signalled = absl::Now();
  daemons_[0]->Signal(SIGTERM);
  auto code = daemons_[0]->Wait(absl::Now() + absl::Seconds(60));
  waiter.join();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  // The server's drain lasts at most 5 s; the call's deadline was 120 s.
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(30));
  EXPECT_EQ(waited_status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << waited_status.error_message();
  EXPECT_TRUE(absl::StrContains(waited_status.error_message(), "shutting down"))
      << waited_status.error_message();
  stubs_.clear();
}

// --device: auto takes the CPU and says why (no GPU data plane, or none
// usable); an explicit CUDA device is refused with the reason, before the
// daemon joins anything.
TEST(ShardProcessDeviceTest, AutoSaysWhyItUsesTheCpu) {
  auto d = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", g_shardd_binary,
                    "' --device=auto --coordinator=127.0.0.1:1 --identity=dev "
                    "--peer_listen=127.0.0.1:0 --listen_unix=/tmp/shardd-dev-",
                    getpid(), ".sock 2>&1")},
      "shardd-auto");
  ASSERT_TRUE(d.ok()) << d.status();
  auto line = (*d)->WaitForLine("shardd: device auto:",
                                absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, "using CPU")) << *line;
  (*d)->Signal(SIGKILL);
  EXPECT_TRUE((*d)->Wait(absl::Now() + absl::Seconds(10)).ok());
}

TEST(ShardProcessDeviceTest, ExplicitCudaDeviceIsRefusedWithTheReason) {
  auto d = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat(
           "exec '", g_shardd_binary,
           "' --device=cuda:0 --coordinator=127.0.0.1:1 --identity=dev 2>&1")},
      "shardd-cuda");
  ASSERT_TRUE(d.ok()) << d.status();
  auto line = (*d)->WaitForLine("--device:", absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  // CPU build: "built without CUDA"; CUDA build: no device, or no GPU data
  // plane. Either way the request is named.
  EXPECT_TRUE(absl::StrContains(*line, "cuda:0 requested, but")) << *line;
  auto code = (*d)->Wait(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
}

// Runs shardd with `flags` (which must be refused before it joins): the
// line naming the refusal, and the exit status.
void ExpectRefused(const std::string& flags, const std::string& says,
                   const std::string& contains, int* code_out) {
  auto d = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", g_shardd_binary, "' ", flags,
                    " --coordinator=127.0.0.1:1 --identity=dev 2>&1")},
      "shardd-refused");
  ASSERT_TRUE(d.ok()) << d.status();
  auto line = (*d)->WaitForLine(says, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, contains)) << *line;
  auto code = (*d)->Wait(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  *code_out = *code;
}

TEST(ShardProcessDeviceTest, UnknownNcclReductionOrderIsRefusedNamingTheFlag) {
  int code = 0;
  ExpectRefused("--nccl_reductions=ring",
                "--nccl_reductions:", "'ring' is not one of: fixed, nccl",
                &code);
  EXPECT_NE(code, 0);
}

// Checkpoints are per rank and verified before the join, so a daemon that
// keeps them must know its rank.
TEST(ShardProcessDeviceTest, CheckpointDirWithoutRankIsRefused) {
  int code = 0;
  ExpectRefused("--checkpoint_dir=/tmp/none", "--checkpoint_dir",
                "--checkpoint_dir needs --rank", &code);
  EXPECT_EQ(code, 2);
}

// The peer port is never shared with another listener (gRPC would set
// SO_REUSEPORT and let the kernel split peers' connections between the two).
TEST(ShardProcessPortTest, PeerPortAnotherServerListensOnIsRefused) {
  auto holder = PortHolder::Start();
  ASSERT_TRUE(holder.ok()) << holder.status();
  const int port = (*holder)->port();
  auto d = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", g_shardd_binary,
                    "' --coordinator=127.0.0.1:1 --identity=port "
                    "--peer_listen=127.0.0.1:",
                    port, " --listen_unix=/tmp/shardd-port-", getpid(),
                    ".sock 2>&1")},
      "shardd-port");
  ASSERT_TRUE(d.ok()) << d.status();
  auto line =
      (*d)->WaitForLine("cannot listen on", absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, absl::StrCat("127.0.0.1:", port)))
      << *line;
  auto code = (*d)->Wait(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
}

// Probes (kubelet) read grpc.health.v1 on the peer port: liveness ("")
// never depends on peers; readiness ("shardd.ready") follows the epoch.
// Peer.FetchShard with bad fields: a status naming the field, and the
// daemon goes on as before (a well-formed request afterwards streams the
// whole shard, and the daemon is still ready and registered).
TEST_F(ShardProcessTest, FetchShardRejectsBadRequestsNamingTheField) {
  std::vector<pb::RegisterModelResponse> reg;
  const std::vector<grpc::Status> reg_status = RegisterOnEveryRank(&reg);
  for (int r = 0; r < kW; ++r) ASSERT_TRUE(reg_status[r].ok());
  const int64_t epoch = Status(0).epoch();
  auto peer = pb::Peer::NewStub(
      grpc::CreateChannel(peers_[0], grpc::InsecureChannelCredentials()));
  // Reads the whole stream: the final status, and the messages' count.
  auto fetch = [&](const pb::FetchShardRequest& request, int* messages) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    auto reader = peer->FetchShard(&context, request);
    pb::FetchShardResponse message;
    *messages = 0;
    while (reader->Read(&message)) ++*messages;
    return reader->Finish();
  };
  pb::FetchShardRequest good;
  good.set_epoch(epoch);
  good.set_requester_rank(0);
  good.set_shard_index(0);  // Rank 0 holds shard 0 (F = 2).
  good.set_step(0);
  struct Case {
    const char* field;
    std::function<void(pb::FetchShardRequest*)> spoil;
    grpc::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"max_chunk_bytes", [](auto* r) { r->set_max_chunk_bytes(-1); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"shard_index", [](auto* r) { r->set_shard_index(-1); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"shard_index", [](auto* r) { r->set_shard_index(1); },
       grpc::StatusCode::FAILED_PRECONDITION},
      {"epoch", [&](auto* r) { r->set_epoch(epoch + 7); },
       grpc::StatusCode::ABORTED},
      {"step", [](auto* r) { r->set_step(5); },
       grpc::StatusCode::FAILED_PRECONDITION},
      // W/F = 1: rank 0 is alone in its replica group, so no requester can
      // take the bytes over it.
      {"requester_rank",
       [](auto* r) {
         r->set_payload_over_replica_group(true);
         r->set_requester_rank(2);
       },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"requester_rank",
       [](auto* r) { r->set_payload_over_replica_group(true); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"requester_rank",
       [](auto* r) {
         r->set_payload_over_replica_group(true);
         r->set_requester_rank(-2);
       },
       grpc::StatusCode::INVALID_ARGUMENT},
  };
  for (const Case& c : cases) {
    pb::FetchShardRequest bad = good;
    c.spoil(&bad);
    int messages = 0;
    const grpc::Status s = fetch(bad, &messages);
    EXPECT_EQ(s.error_code(), c.code) << c.field << ": " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), c.field))
        << c.field << ": " << s.error_message();
    EXPECT_EQ(messages, 0) << c.field;
  }
  int messages = 0;
  const grpc::Status s = fetch(good, &messages);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_GE(messages, 3);  // Header, at least one chunk, trailer.
  const pb::GetStatusResponse after = Status(0);
  EXPECT_TRUE(after.ready());
  EXPECT_TRUE(after.registered());
  EXPECT_EQ(after.epoch(), epoch);
}

// Hostile requests to every RPC of the Peer service (from its descriptor)
// of a registered daemon: edge values, huge fields, out-of-range enums, the
// real epoch, step and shard index from a dictionary, damaged bytes. Every
// call ends with a status within its deadline, a well-formed request never
// gets INTERNAL or UNKNOWN, and both daemons go on serving, still ready.
// FetchShard is read-only: whatever is asked, nothing changes.
TEST_F(ShardProcessTest, HostilePeerRequestsGetAStatusAndChangeNothing) {
  std::vector<pb::RegisterModelResponse> reg;
  const std::vector<grpc::Status> reg_status = RegisterOnEveryRank(&reg);
  for (int r = 0; r < kW; ++r) ASSERT_TRUE(reg_status[r].ok());
  const pb::GetStatusResponse before = Status(0);
  const google::protobuf::ServiceDescriptor* service =
      pb::ProbeRequest::descriptor()->file()->FindServiceByName("Peer");
  ASSERT_NE(service, nullptr);
  HostileDictionary dictionary;
  dictionary.integers = {before.epoch(), 0, 1, kW};
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(peers_[0], grpc::InsecureChannelCredentials());
  int calls = 0;
  for (int m = 0; m < service->method_count(); ++m) {
    const google::protobuf::MethodDescriptor* method = service->method(m);
    const std::string path =
        absl::StrCat("/", service->full_name(), "/", method->name());
    HostileMessageFactory factory(/*seed=*/77 + m, dictionary);
    std::map<int, int> codes;
    for (int i = 0; i < 150; ++i) {
      // Half are a valid request with a few fields spoilt.
      std::unique_ptr<google::protobuf::Message> seed;
      if (method->name() == "FetchShard") {
        auto good = std::make_unique<pb::FetchShardRequest>();
        good->set_epoch(before.epoch());
        good->set_requester_rank(1);
        good->set_shard_index(0);  // Rank 0 holds shard 0 (F = 2).
        good->set_step(before.committed_step());
        seed = std::move(good);
      } else {
        auto good = std::make_unique<pb::ProbeRequest>();
        good->set_epoch(before.epoch());
        good->set_from_rank(1);
        good->set_include_model(true);
        seed = std::move(good);
      }
      std::string bytes =
          (factory.Below(2) == 0 ? factory.Mutate(*seed)
                                 : factory.Make(method->input_type()))
              ->SerializeAsString();
      const bool mangled = factory.Below(8) == 0;
      if (mangled) bytes = factory.Mangle(std::move(bytes));
      // A FetchShard stream ends by itself (header, chunks, trailer).
      const GenericCallResult result =
          CallGeneric(channel, path, bytes, absl::Seconds(2));
      ++calls;
      const grpc::StatusCode code = result.status.error_code();
      ++codes[code];
      EXPECT_FALSE(result.hung) << path << " request " << i << " hung";
      EXPECT_NE(code, grpc::StatusCode::UNKNOWN)
          << path << " " << i << ": " << result.status.error_message();
      if (!mangled) {
        EXPECT_NE(code, grpc::StatusCode::INTERNAL)
            << path << " " << i << ": " << result.status.error_message();
      }
    }
    std::string summary;
    for (const auto& [code, n] : codes)
      absl::StrAppend(&summary, " ", code, ":", n);
    std::printf("%s: codes%s\n", path.c_str(), summary.c_str());
  }
  EXPECT_GE(calls, 300);
  for (int r = 0; r < kW; ++r) {
    EXPECT_TRUE(daemons_[r]->Running()) << "daemon " << r << " died";
  }
  const pb::GetStatusResponse after = Status(0);
  EXPECT_TRUE(after.ready());
  EXPECT_TRUE(after.registered());
  EXPECT_EQ(after.epoch(), before.epoch());
  EXPECT_EQ(after.committed_step(), before.committed_step());
}

TEST_F(ShardProcessTest, PeerPortServesLivenessAndReadinessForProbes) {
  ASSERT_EQ(peers_.size(), 2u);
  EXPECT_EQ(Health(peers_[0], ""), 1);
  EXPECT_EQ(Health(peers_[0], "shardd.v1.Trainer"), 1);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Health(peers_[0], "shardd.ready") != 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // Polling with a deadline.
  }
  EXPECT_EQ(Health(peers_[0], "shardd.ready"), 1);
  EXPECT_EQ(Health(peers_[0], "no.such.service"), -1);  // NOT_FOUND.
  // The peer dies: daemon 0 is no longer ready, but still alive.
  daemons_[1].reset();  // SIGKILL.
  while (Health(peers_[0], "shardd.ready") != 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(Health(peers_[0], "shardd.ready"), 2);
  EXPECT_EQ(Health(peers_[0], ""), 1);
}

// A second daemon given the socket path a running daemon serves refuses to
// start, before joining anything, instead of taking the path over (new
// trainers would reach it while the running daemon's stayed put); the
// running daemon goes on serving. (A stale socket, a killed daemon's, is
// taken over by every replacement in tests/faults.)
TEST_F(ShardProcessTest, SocketARunningDaemonServesIsRefused) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!Status(0).ready() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // Polling with a deadline.
  }
  ASSERT_TRUE(Status(0).ready());
  auto d = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", g_shardd_binary, "' --coordinator=", address_,
                    " --identity=intruder --shm_dir=", shm_dir_,
                    " --listen_unix=", sockets_[0],
                    " --peer_listen=127.0.0.1:0 2>&1")},
      "shardd-intruder");
  ASSERT_TRUE(d.ok()) << d.status();
  auto line = (*d)->WaitForLine("--listen_unix:", deadline);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, sockets_[0])) << *line;
  EXPECT_TRUE(absl::StrContains(*line, "is served by a running process"))
      << *line;
  auto code = (*d)->Wait(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  for (const std::string& l : (*d)->lines()) {
    EXPECT_FALSE(absl::StrContains(l, "listening on")) << l;
  }
  EXPECT_TRUE(Status(0).ready());
  EXPECT_TRUE(Status(1).ready());
}

// A second daemon with a running daemon's identity (its own socket) is
// refused by the coordinator, whose probe finds the first one alive:
// replacing it would have the two evict each other for good (each rejoins
// when replaced). The running daemons keep their slots and their epoch.
TEST_F(ShardProcessTest, SecondDaemonWithALiveIdentityIsRefused) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!(Status(0).ready() && Status(1).ready()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // Polling with a deadline.
  }
  ASSERT_TRUE(Status(1).ready());
  const int64_t epoch = Status(1).epoch();
  auto d = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", g_shardd_binary, "' --coordinator=", address_,
                    " --identity=node-1 --rank=1 --shm_dir=", shm_dir_,
                    " --listen_unix=", dir_, "/twin.sock",
                    " --peer_listen=127.0.0.1:0 2>&1")},
      "shardd-twin");
  ASSERT_TRUE(d.ok()) << d.status();
  auto line = (*d)->WaitForLine("cannot join", deadline);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, "ALREADY_EXISTS")) << *line;
  EXPECT_TRUE(absl::StrContains(*line, "'node-1' is live in slot 1")) << *line;
  auto code = (*d)->Wait(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_TRUE(Status(0).ready());
  EXPECT_TRUE(Status(1).ready());
  EXPECT_EQ(Status(1).epoch(), epoch);
}

// The other order: daemon 1 hangs (SIGSTOP), a second process with its
// identity takes the slot (the coordinator's probe of the hung one times
// out), and daemon 1 wakes up. Its re-join is refused (the new holder
// answers probes), so it exits with status 1 saying why, instead of living
// on outside the job; the new holder keeps the slot.
TEST_F(ShardProcessTest, DaemonWhoseSlotWasTakenExitsWhenItWakesUp) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!(Status(0).ready() && Status(1).ready()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // Polling with a deadline.
  }
  ASSERT_TRUE(Status(1).ready());
  daemons_[1]->Signal(SIGSTOP);
  auto twin = Subprocess::Spawn(
      {g_shardd_binary, absl::StrCat("--coordinator=", address_),
       "--identity=node-1", "--rank=1", absl::StrCat("--shm_dir=", shm_dir_),
       absl::StrCat("--listen_unix=", dir_, "/twin.sock"),
       "--peer_listen=127.0.0.1:0"},
      "shardd-twin");
  ASSERT_TRUE(twin.ok()) << twin.status();
  auto listening = (*twin)->WaitForLine("shardd rank 1 listening", deadline);
  daemons_[1]->Signal(SIGCONT);
  ASSERT_TRUE(listening.ok()) << listening.status();
  auto ended = daemons_[1]->WaitForLine("membership ended", deadline);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_TRUE(absl::StrContains(*ended, "ALREADY_EXISTS")) << *ended;
  EXPECT_TRUE(absl::StrContains(*ended, "'node-1' is live in slot 1"))
      << *ended;
  auto code = daemons_[1]->Wait(absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_TRUE((*twin)->Running());
}

// W/F = 1 (F = W = 2) and no --checkpoint_dir: the replacement of a killed
// daemon finds its shard lost for good. The job fails once, and everyone
// says so: the survivor's GetStatus and `shardctl status` show FAILED with
// the reason, WatchEvents sends JobFailed, every trainer call returns
// DATA_LOSS (terminal, not the retryable ABORTED or UNAVAILABLE), and the
// survivor, the replacement and the coordinator exit with status 3.
TEST_F(ShardProcessTest, LostShardWithoutCheckpointFailsTheJobForEveryone) {
  std::vector<pb::RegisterModelResponse> reg;
  for (const grpc::Status& s : RegisterOnEveryRank(&reg)) {
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  absl::Status trained[kW];
  {
    std::vector<std::thread> trainers;
    for (int r = 0; r < kW; ++r) {
      trainers.emplace_back([&, r] { trained[r] = Train(r); });
    }
    for (auto& t : trainers) t.join();
  }
  for (int r = 0; r < kW; ++r) ASSERT_TRUE(trained[r].ok()) << trained[r];
  grpc::ClientContext watch_context;
  std::unique_ptr<grpc::ClientReader<pb::TrainerEvent>> events =
      stubs_[0]->WatchEvents(&watch_context, pb::WatchEventsRequest());

  daemons_[1]->Signal(SIGKILL);
  ASSERT_TRUE(daemons_[1]->Wait(absl::Now() + absl::Seconds(10)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto replacement = Subprocess::Spawn(
      {g_shardd_binary, absl::StrCat("--coordinator=", address_),
       "--identity=node-1", "--rank=1", absl::StrCat("--shm_dir=", shm_dir_),
       absl::StrCat("--listen_unix=", dir_, "/r1b.sock"),
       "--peer_listen=127.0.0.1:0"},
      "shardd-1b");
  ASSERT_TRUE(replacement.ok()) << replacement.status();

  // The survivor hears it within about a lease (polled, with a deadline).
  pb::GetStatusResponse status = Status(0);
  while (status.job_state() != pb::JOB_STATE_FAILED && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    status = Status(0);
  }
  ASSERT_EQ(status.job_state(), pb::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(
      status.job_failure(), absl::StrCat("shard 1 at step ", kSteps,
                                         " is lost: it was held by rank 1")))
      << status.job_failure();
  EXPECT_TRUE(absl::StrContains(status.job_failure(), "no --checkpoint_dir"))
      << status.job_failure();

  {
    // The coordinator's view: FAILED, the reason, and JOB_FAILED logged.
    auto coordinator = pb::Coordinator::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    pb::ClusterState cluster;
    ASSERT_TRUE(coordinator
                    ->GetClusterState(Ctx(absl::Seconds(5)).get(),
                                      pb::GetClusterStateRequest(), &cluster)
                    .ok());
    EXPECT_EQ(cluster.job_state(), pb::JOB_STATE_FAILED);
    EXPECT_TRUE(absl::StrContains(status.job_failure(), cluster.job_failure()))
        << cluster.job_failure();
    int logged = 0;
    for (const pb::Decision& d : cluster.decisions()) {
      logged += d.kind() == pb::DECISION_KIND_JOB_FAILED ? 1 : 0;
    }
    EXPECT_EQ(logged, 1);
  }

  auto shardctl = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", g_shardctl_binary, "' --socket=", sockets_[0],
                    " status 2>&1")},
      "shardctl");
  ASSERT_TRUE(shardctl.ok()) << shardctl.status();
  auto job = (*shardctl)->WaitForLine("job ", deadline);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(absl::StrContains(*job, "FAILED: the job has failed: shard 1"))
      << *job;

  pb::TrainerEvent event;
  bool heard = false;
  while (!heard && events->Read(&event)) heard = event.has_job_failed();
  ASSERT_TRUE(heard);
  EXPECT_TRUE(absl::StrContains(event.job_failed().reason(), "shard 1 at"))
      << event.job_failed().reason();
  watch_context.TryCancel();
  events->Finish();

  // A trainer call: DATA_LOSS with the reason (every call maps the same
  // way; the first one answered lets the daemon stop).
  pb::WaitReadyResponse ready;
  grpc::Status wait = stubs_[0]->WaitReady(Ctx(absl::Seconds(10)).get(),
                                           pb::WaitReadyRequest(), &ready);
  EXPECT_EQ(wait.error_code(), grpc::StatusCode::DATA_LOSS)
      << wait.error_message();
  EXPECT_TRUE(absl::StrContains(wait.error_message(), "shard 1 at step"))
      << wait.error_message();

  for (Subprocess* p :
       {daemons_[0].get(), replacement->get(), coordinator_.get()}) {
    auto code = p->Wait(absl::Now() + absl::Seconds(40));
    ASSERT_TRUE(code.ok()) << p->name() << ": " << code.status();
    EXPECT_EQ(*code, 3) << p->name();
  }
}

// WatchEvents: a snapshot first; a dead peer shows as an epoch change; a
// watcher that reconnects with after_sequence gets what it missed, not a
// snapshot.
TEST_F(ShardProcessTest, WatchEventsStartsWithASnapshotAndResumes) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!Status(0).ready() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // Polling with a deadline.
  }
  ASSERT_TRUE(Status(0).ready());
  auto context = Ctx(absl::Seconds(30));
  std::unique_ptr<grpc::ClientReader<pb::TrainerEvent>> reader =
      stubs_[0]->WatchEvents(context.get(), pb::WatchEventsRequest());
  pb::TrainerEvent first;
  ASSERT_TRUE(reader->Read(&first));
  ASSERT_TRUE(first.has_snapshot()) << first.DebugString();
  EXPECT_TRUE(first.snapshot().ready());
  const int64_t epoch = first.snapshot().epoch();
  daemons_[1].reset();  // SIGKILL: the next epoch starts.
  pb::TrainerEvent event;
  int64_t changed_seq = 0;
  while (reader->Read(&event)) {
    EXPECT_GT(event.sequence(), first.sequence());
    if (event.has_epoch_changed() && event.epoch_changed().epoch() > epoch) {
      changed_seq = event.sequence();
      break;
    }
  }
  ASSERT_GT(changed_seq, 0) << "no epoch change seen";
  context->TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);

  auto again = Ctx(absl::Seconds(10));
  pb::WatchEventsRequest resume;
  resume.set_after_sequence(changed_seq - 1);
  reader = stubs_[0]->WatchEvents(again.get(), resume);
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_FALSE(event.has_snapshot());
  EXPECT_EQ(event.sequence(), changed_seq);
  EXPECT_TRUE(event.has_epoch_changed());
  again->TryCancel();
  reader->Finish();
}

}  // namespace
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: %s COORDINATOR_BINARY SHARDD_BINARY SHARDCTL_BINARY\n",
                 argv[0]);
    return 2;
  }
  shardd::tests::g_coordinator_binary = argv[1];
  shardd::tests::g_shardd_binary = argv[2];
  shardd::tests::g_shardctl_binary = argv[3];
  return RUN_ALL_TESTS();
}
