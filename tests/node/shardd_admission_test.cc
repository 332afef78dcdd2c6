// Process tests of memory admission: a coordinator (W = 1) and one shardd
// on 127.0.0.1, driven through the Trainer API.
//  * The model of issue #27 (4 units of one 65536 x 65536 fp32 weight,
//    NO_SHARD, AdamW, normal init: ~272 GiB on one rank) is refused within
//    a second with RESOURCE_EXHAUSTED and the breakdown, the daemon's
//    resident memory is unchanged (VmRSS measured before and after), no
//    segment exists, and the daemon then serves a model that fits.
//  * --memory_limit_bytes: a model just over it is refused, just under is
//    admitted (the plan's total from Trainer.CheckMemory).
//  * A small tmpfs as --shm_dir: a model whose segments do not fit its free
//    space is refused naming it; one that fits is admitted.
//  * The operator and the trainer see a refusal: shardplan --socket asks
//    the daemon (Trainer.CheckMemory); example_trainer prints the
//    breakdown one item a line.
//  * A real memory cgroup (v1 memory.limit_in_bytes or v2 memory.max, a
//    child of this test's own cgroup) around the daemon: its limit is read
//    and binds. Skipped, saying why, where no cgroup can be created.
// Measured figures are printed as "MEASURED: ..." lines.
//
//   shardd_admission_test COORDINATOR_BINARY SHARDD_BINARY SHARDPLAN_BINARY
//       EXAMPLE_TRAINER_BINARY

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/memory/cgroup_memory.h"
#include "daemon/testing/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;

std::string g_coordinator_binary;
std::string g_shardd_binary;
std::string g_shardplan_binary;
std::string g_trainer_binary;

constexpr int64_t kMiB = int64_t{1} << 20;

std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoSeconds(timeout));
  return ctx;
}

// `units` units of one [rows, cols] fp32 weight, NO_SHARD, AdamW, normal
// init: what a new user registers.
pb::ModelSpec Model(int units, int64_t rows, int64_t cols) {
  pb::ModelSpec spec;
  for (int u = 0; u < units; ++u) {
    pb::UnitSpec* unit = spec.add_units();
    unit->set_name(absl::StrCat("layer", u));
    pb::TensorSpec* t = unit->add_tensors();
    t->set_name("weight");
    t->add_shape(rows);
    t->add_shape(cols);
    t->set_dtype(pb::DTYPE_FP32);
    pb::NormalInit* normal = t->mutable_init()->mutable_normal();
    normal->set_seed(u + 1);
    normal->set_std(0.02f);
  }
  pb::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(pb::SHARDING_STRATEGY_NO_SHARD);
  pb::AdamW* a = c->mutable_optimizer()->mutable_adamw();
  a->set_lr(1e-3);
  a->set_beta1(0.9);
  a->set_beta2(0.999);
  a->set_eps(1e-8);
  return spec;
}

// VmRSS of `pid` in bytes, -1 when unreadable.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    std::vector<std::string> fields =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t kib = 0;
    if (fields.size() == 3 && absl::SimpleAtoi(fields[1], &kib)) {
      return kib * 1024;
    }
  }
  return -1;
}

bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path);
  out << content;
  out.flush();
  return out.good();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Files of `dir` (no "." or "..").
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    closedir(d);
  }
  return out;
}

class AdmissionProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardd-admit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    shm_dir_ = dir_ + "/shm";
    ASSERT_EQ(mkdir(shm_dir_.c_str(), 0700), 0);
    auto c = Subprocess::Spawn({g_coordinator_binary, "--listen=127.0.0.1:0",
                                "--world_size=1", "--sharding_factor=1"},
                               "coordinator");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    auto line = coordinator_->WaitForLine("coordinator listening on",
                                          absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status();
    std::string rest = line->substr(line->find(" on ") + 4);
    address_ = rest.substr(0, rest.find(' '));
  }

  void TearDown() override {
    StopDaemon();
    coordinator_.reset();
    if (mounted_) umount2(shm_dir_.c_str(), MNT_DETACH);
    if (!cgroup_.empty()) {
      // The daemon is reaped; the kernel may take a moment to let go.
      const absl::Time until = absl::Now() + absl::Seconds(10);
      while (rmdir(cgroup_.c_str()) != 0 && errno == EBUSY &&
             absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(20));  // Polling with a deadline.
      }
    }
    std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  // Starts shardd with `flags` (and --shm_dir, the socket, the
  // coordinator); inside the cgroup whose cgroup.procs is `procs` if set.
  // Waits until its epoch is ready.
  void StartDaemon(const std::vector<std::string>& flags,
                   const std::string& procs = "") {
    socket_ = absl::StrCat(dir_, "/d", ++daemons_started_, ".sock");
    std::string command = "exec";
    if (!procs.empty()) {
      command = absl::StrCat("echo $$ > '", procs, "' && exec");
    }
    absl::StrAppend(&command, " '", g_shardd_binary,
                    "' --coordinator=", address_,
                    " --identity=node-0 --rank=0 --shm_dir=", shm_dir_,
                    " --listen_unix=", socket_, " --peer_listen=127.0.0.1:0");
    for (const std::string& flag : flags) absl::StrAppend(&command, " ", flag);
    auto d = Subprocess::Spawn({"/bin/sh", "-c", command}, "shardd");
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    auto ready =
        daemon_->WaitForLine("shardd rank", absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(ready.ok()) << ready.status();
    stub_ = pb::Trainer::NewStub(
        grpc::CreateChannel(absl::StrCat("unix:", socket_),
                            grpc::experimental::LocalCredentials(UDS)));
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!Status().ready() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));  // Polling with a deadline.
    }
    ASSERT_TRUE(Status().ready());
  }

  // SIGTERM: the daemon leaves, so a new one may take node-0's slot.
  void StopDaemon() {
    stub_.reset();
    if (daemon_ == nullptr) return;
    daemon_->Signal(SIGTERM);
    EXPECT_TRUE(daemon_->Wait(absl::Now() + absl::Seconds(30)).ok());
    daemon_.reset();
  }

  pb::GetStatusResponse Status() {
    pb::GetStatusResponse status;
    grpc::Status s = stub_->GetStatus(Ctx(absl::Seconds(5)).get(),
                                      pb::GetStatusRequest(), &status);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return status;
  }

  grpc::Status Register(const pb::ModelSpec& model,
                        pb::RegisterModelResponse* response) {
    pb::RegisterModelRequest request;
    *request.mutable_model() = model;
    request.set_transport(pb::TRANSPORT_SHARED_MEMORY);
    return stub_->RegisterModel(Ctx(absl::Seconds(60)).get(), request,
                                response);
  }

  pb::CheckMemoryResponse Check(const pb::ModelSpec& model) {
    pb::CheckMemoryRequest request;
    *request.mutable_model() = model;
    pb::CheckMemoryResponse response;
    grpc::Status s =
        stub_->CheckMemory(Ctx(absl::Seconds(10)).get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  static int64_t PlanTotal(const pb::CheckMemoryResponse& check) {
    int64_t total = 0;
    for (const pb::PlannedMemory& item : check.plan()) total += item.bytes();
    return total;
  }

  // One training step of a registered W = 1 model with `units` units of
  // `numel` elements (zero gradients, inline).
  void TrainOneStep(int units, int64_t numel) {
    for (int u = units - 1; u >= 0; --u) {
      pb::GatherRequest gather;
      gather.set_unit(u);
      gather.set_pass(pb::PASS_BACKWARD);
      pb::GatherResponse gathered;
      grpc::Status s =
          stub_->Gather(Ctx(absl::Seconds(30)).get(), gather, &gathered);
      ASSERT_TRUE(s.ok()) << s.error_message();
      pb::ReduceGradRequest reduce;
      reduce.set_unit(u);
      reduce.mutable_grad()->set_dtype(pb::DTYPE_FP32);
      reduce.mutable_grad()->set_byte_length(numel * 4);
      reduce.mutable_grad()->set_inline_data(std::string(numel * 4, '\0'));
      pb::ReduceGradResponse reduced;
      s = stub_->ReduceGrad(Ctx(absl::Seconds(30)).get(), reduce, &reduced);
      ASSERT_TRUE(s.ok()) << s.error_message();
      pb::ReleaseRequest release;
      release.set_unit(u);
      pb::ReleaseResponse released;
      s = stub_->Release(Ctx(absl::Seconds(5)).get(), release, &released);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    pb::StepRequest step;
    step.set_step(1);
    pb::StepResponse stepped;
    grpc::Status s = stub_->Step(Ctx(absl::Seconds(30)).get(), step, &stepped);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(stepped.committed_step(), 1);
  }

  std::string dir_, shm_dir_, address_, socket_, cgroup_;
  bool mounted_ = false;
  int daemons_started_ = 0;
  std::unique_ptr<Subprocess> coordinator_;
  std::unique_ptr<Subprocess> daemon_;
  std::unique_ptr<pb::Trainer::Stub> stub_;
};

TEST_F(AdmissionProcessTest, IssueModelIsRefusedAtOnceAndTheDaemonServesOn) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  const int64_t rss_before = ResidentBytes(daemon_->pid());
  ASSERT_GT(rss_before, 0);

  pb::RegisterModelResponse response;
  const absl::Time start = absl::Now();
  const grpc::Status s = Register(Model(4, 65536, 65536), &response);
  const absl::Duration latency = absl::Now() - start;
  const int64_t rss_after = ResidentBytes(daemon_->pid());
  std::printf(
      "MEASURED: issue model refused in %.1f ms; daemon VmRSS %lld kB "
      "before, %lld kB after (%+lld kB)\n",
      absl::ToDoubleMilliseconds(latency),
      static_cast<long long>(rss_before / 1024),
      static_cast<long long>(rss_after / 1024),
      static_cast<long long>((rss_after - rss_before) / 1024));
  std::printf("MEASURED: refusal: %s\n", s.error_message().c_str());

  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_LT(latency, absl::Seconds(1));
  const std::string& m = s.error_message();
  EXPECT_TRUE(absl::StartsWith(m,
                               "RegisterModel for rank 0 of W = 1, F = 1: the "
                               "plan does not fit in memory: it needs 272.03 "
                               "GiB"))
      << m;
  for (const std::string& part : std::vector<std::string>{
           "of host memory, which may use", "/proc/meminfo MemAvailable leaves",
           "less a safety margin of",
           "Plan: parameter shards 64.00 GiB (shm), gradient shards 64.00 "
           "GiB, optimizer state 128.00 GiB, gradient slot 16.00 GiB (shm), "
           "staging 32.00 MiB; host 272.03 GiB (of it shm 80.00 GiB), device 0 "
           "B.",
           absl::StrCat("free space of ", shm_dir_)}) {
    EXPECT_TRUE(absl::StrContains(m, part)) << part << " not in: " << m;
  }
  // Nothing was allocated: no segment, the same resident memory (a few
  // pages of gRPC and parsing at most).
  for (const std::string& name : Files(shm_dir_)) {
    EXPECT_TRUE(absl::EndsWith(name, ".owner")) << name;
  }
  EXPECT_LT(rss_after - rss_before, 8 * kMiB);
  EXPECT_FALSE(Status().registered());

  // The daemon still serves a model that fits.
  ASSERT_TRUE(Register(Model(2, 256, 256), &response).ok());
  EXPECT_FALSE(response.reattached());
  EXPECT_TRUE(Status().registered());
  ASSERT_NO_FATAL_FAILURE(TrainOneStep(2, 256 * 256));
}

TEST_F(AdmissionProcessTest, ModelJustOverTheMemoryLimitIsRefusedJustUnderIs) {
  const pb::ModelSpec model = Model(2, 1024, 1024);
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  const pb::CheckMemoryResponse unlimited = Check(model);
  EXPECT_TRUE(unlimited.admitted()) << unlimited.refusal();
  const int64_t total = PlanTotal(unlimited);
  // Parameters, gradients and two AdamW moments of 2 x 4 MiB, one 4 MiB
  // gradient slot, 32 MiB of staging.
  EXPECT_EQ(total, 2 * 4 * kMiB * 4 + 4 * kMiB + 32 * kMiB);
  StopDaemon();

  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({absl::StrCat("--memory_limit_bytes=", total - 1)}));
  const pb::CheckMemoryResponse over = Check(model);
  EXPECT_FALSE(over.admitted());
  pb::RegisterModelResponse response;
  grpc::Status s = Register(model, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(
      s.error_message(),
      absl::StrCat("it needs 68.00 MiB (", total,
                   " B) of planned memory, which may use 68.00 MiB (",
                   total - 1, " B): --memory_limit_bytes=", total - 1)))
      << s.error_message();
  EXPECT_FALSE(Status().registered());
  StopDaemon();

  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({absl::StrCat("--memory_limit_bytes=", total)}));
  EXPECT_TRUE(Check(model).admitted());
  s = Register(model, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.memory().held().total_bytes(), total - 32 * kMiB);
}

TEST_F(AdmissionProcessTest, ShmFreeSpaceOfASmallTmpfsIsHonoured) {
  if (mount("tmpfs", shm_dir_.c_str(), "tmpfs", 0, "size=64m,mode=0700") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  mounted_ = true;
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  // NO_SHARD fp32: the parameter shards and the gradient slot are segments.
  // 3 units of 16 MiB: 48 + 16 MiB of segments > 64 MiB less 5%.
  pb::RegisterModelResponse response;
  grpc::Status s = Register(Model(3, 2048, 2048), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(),
                                "it needs 64.00 MiB (67108864 B) of shm space, "
                                "which may use 60.80 MiB"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(
      s.error_message(),
      absl::StrCat("free space of ", shm_dir_, " (a 64.00 MiB file system)")))
      << s.error_message();
  EXPECT_FALSE(absl::StrContains(s.error_message(), "of host memory, which"))
      << s.error_message();
  // 2 units: 32 + 16 MiB of segments fit.
  s = Register(Model(2, 2048, 2048), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
}

// Runs `command` (sh -c, stderr into stdout) to its end: its exit code and
// every line it printed.
int RunToEnd(const std::string& command, std::string* output) {
  auto p = Subprocess::Spawn({"/bin/sh", "-c", command + " 2>&1"}, "tool");
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return -1;
  while ((*p)->ReadLine(absl::Now() + absl::Seconds(60)).ok()) {
  }
  for (const std::string& line : (*p)->lines()) {
    absl::StrAppend(output, line, "\n");
  }
  absl::StatusOr<int> code = (*p)->Wait(absl::Now() + absl::Seconds(60));
  EXPECT_TRUE(code.ok()) << code.status();
  return code.ok() ? *code : -1;
}

TEST_F(AdmissionProcessTest, OperatorAndTrainerSeeTheBreakdown) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--memory_limit_bytes=1000000"}));
  // The operator, before the job: the issue's model against this node.
  std::string plan;
  EXPECT_EQ(
      RunToEnd(absl::StrCat("'", g_shardplan_binary, "' --socket=", socket_,
                            " --world_size=1 --strategy=NO_SHARD "
                            "--sharding_factor=1 --layers=4 "
                            "--hidden=65536 --bias=false"),
               &plan),
      1)
      << plan;
  EXPECT_TRUE(absl::StrContains(
      plan, absl::StrCat("Admission by the shardd at unix:", socket_,
                         " (rank 0 of W = 1, F = 1): DOES "
                         "NOT FIT")))
      << plan;
  EXPECT_TRUE(absl::StrContains(plan, "optimizer state")) << plan;
  EXPECT_TRUE(absl::StrContains(plan, "128.00 GiB")) << plan;
  EXPECT_TRUE(absl::StrContains(plan, "from --memory_limit_bytes=1000000") ||
              absl::StrContains(plan, "--memory_limit_bytes=1000000"))
      << plan;

  // The trainer: its RegisterModel is refused and it prints why, one item
  // a line.
  std::string trainer;
  EXPECT_EQ(RunToEnd(absl::StrCat("'", g_trainer_binary, "' --socket=", socket_,
                                  " --strategy=NO_SHARD --steps=1 "
                                  "--rpc_timeout_ms=20000"),
                     &trainer),
            1)
      << trainer;
  for (const char* part :
       {"example_trainer: RESOURCE_EXHAUSTED: RegisterModel for rank 0 of W "
        "= 1, F = 1: the plan does not fit in memory:\n    it needs",
        "of planned memory, which may use 976.56 KiB (1000000 B): "
        "--memory_limit_bytes=1000000\n",
        "\n  plan (host ", "\n    staging 32.00 MiB\n", "\n  limits:\n"}) {
    EXPECT_TRUE(absl::StrContains(trainer, part))
        << part << " not in: " << trainer;
  }
  EXPECT_FALSE(Status().registered());
}

// This test process's memory cgroup directory and whether it is v2.
struct OwnCgroup {
  std::string dir;
  bool v2 = false;
};

std::optional<OwnCgroup> FindOwnCgroup(std::string* why) {
  const memory::ProcCgroup self =
      memory::ParseProcSelfCgroup(ReadFile("/proc/self/cgroup"));
  for (const memory::CgroupMount& mount :
       memory::ParseCgroupMounts(ReadFile("/proc/self/mountinfo"))) {
    const std::optional<std::string>& path =
        mount.v2 ? self.v2_path : self.v1_memory_path;
    if (!path.has_value()) continue;
    std::optional<std::string> dir = memory::CgroupDirectory(mount, *path);
    if (!dir.has_value()) continue;
    // v2 only where the memory controller is delegated to our children.
    if (mount.v2 && !absl::StrContains(
                        ReadFile(*dir + "/cgroup.subtree_control"), "memory")) {
      continue;
    }
    return OwnCgroup{*dir, mount.v2};
  }
  *why = "no memory cgroup (v1, or v2 with the memory controller delegated)";
  return std::nullopt;
}

TEST_F(AdmissionProcessTest, LimitOfARealMemoryCgroupIsReadAndBinds) {
  std::string why;
  const std::optional<OwnCgroup> own = FindOwnCgroup(&why);
  if (!own.has_value()) GTEST_SKIP() << why;
  const std::string child =
      absl::StrCat(own->dir, "/shardd-admission-", getpid());
  if (mkdir(child.c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot create a cgroup under " << own->dir << ": "
                 << std::strerror(errno);
  }
  cgroup_ = child;
  const std::string limit_file =
      child + (own->v2 ? "/memory.max" : "/memory.limit_in_bytes");
  ASSERT_TRUE(WriteFile(limit_file, absl::StrCat(512 * kMiB)))
      << limit_file << ": " << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}, child + "/cgroup.procs"));
  // The daemon runs inside it.
  EXPECT_TRUE(absl::StrContains(
      ReadFile(absl::StrCat("/proc/", daemon_->pid(), "/cgroup")),
      absl::StrCat("/shardd-admission-", getpid())));

  const pb::CheckMemoryResponse check = Check(Model(2, 256, 256));
  const pb::MemoryLimit* cgroup_limit = nullptr;
  for (const pb::MemoryLimit& limit : check.limits()) {
    if (absl::StartsWith(limit.source(), "cgroup")) cgroup_limit = &limit;
  }
  ASSERT_NE(cgroup_limit, nullptr) << check.DebugString();
  EXPECT_TRUE(absl::StartsWith(
      cgroup_limit->source(),
      absl::StrCat("cgroup ",
                   own->v2 ? "v2 memory.max" : "v1 memory.limit_in_bytes",
                   " of ", child, " (512.00 MiB limit, ")))
      << cgroup_limit->source();
  EXPECT_EQ(cgroup_limit->scope(), "host memory");
  // 512 MiB less what the daemon already uses.
  EXPECT_GT(cgroup_limit->available_bytes(), 256 * kMiB);
  EXPECT_LT(cgroup_limit->available_bytes(), 512 * kMiB);
  EXPECT_EQ(cgroup_limit->usable_bytes(),
            cgroup_limit->available_bytes() - 256 * kMiB);
  std::printf("MEASURED: in a %s cgroup of 512 MiB: %s, %lld B available\n",
              own->v2 ? "v2" : "v1", cgroup_limit->source().c_str(),
              static_cast<long long>(cgroup_limit->available_bytes()));

  // 4 units of 16 MiB: 64 + 64 + 128 + 16 + 32 MiB > 512 MiB less in use
  // and the margin, though far below this machine's MemAvailable.
  pb::RegisterModelResponse response;
  grpc::Status s = Register(Model(4, 2048, 2048), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(
      s.error_message(), absl::StrCat("it needs 304.00 MiB (", 304 * kMiB,
                                      " B) of host memory, which may use")))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), child)) << s.error_message();
  s = Register(Model(2, 256, 256), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: %s COORDINATOR_BINARY SHARDD_BINARY SHARDPLAN_BINARY "
                 "EXAMPLE_TRAINER_BINARY\n",
                 argv[0]);
    return 2;
  }
  shardd::tests::g_coordinator_binary = argv[1];
  shardd::tests::g_shardd_binary = argv[2];
  shardd::tests::g_shardplan_binary = argv[3];
  shardd::tests::g_trainer_binary = argv[4];
  return RUN_ALL_TESTS();
}
