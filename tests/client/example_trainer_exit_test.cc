// example_trainer's exit status when its daemon says that the job has
// failed: 3 (core::kExitJobFailed), whichever call hears it first.
//
// The daemon is a fake Trainer service on a Unix socket that serves one
// whole step of a two-layer MLP (asynchronous forward Gathers, a Release,
// backward Gathers, two ReduceGrads, Step) from a shared-memory segment it
// owns, except that one chosen call answers the job's DATA_LOSS, with or
// without the daemon's mark (rpc::kJobFailedTrailer). A real daemon marks
// every trainer call that fails once the job has failed
// (daemon/node/trainer_service.cc); the trainer must not lose the mark on
// its way to the exit status, as it did when it named the failed call by
// rebuilding the status from its code and message (2 of 7 runs of
// job_failed_alert_test saw a trainer exit 1).

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/exit_status.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/rpc/grpc_status.h"
#include "daemon/testing/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::tests {
namespace {

const char* g_trainer_binary = nullptr;

// The call of the step that answers the job's failure.
enum class FailingCall {
  kNone,
  kRegisterModel,
  kGatherForward,
  kRelease,
  kGatherBackward,
  kReduceGrad,
  kStep,
  // Step answers ABORTED (a peer failed), then WaitReady the failure.
  kWaitReady,
};

const char* Name(FailingCall call) {
  switch (call) {
    case FailingCall::kNone:
      return "none";
    case FailingCall::kRegisterModel:
      return "RegisterModel";
    case FailingCall::kGatherForward:
      return "GatherForward";
    case FailingCall::kRelease:
      return "Release";
    case FailingCall::kGatherBackward:
      return "GatherBackward";
    case FailingCall::kReduceGrad:
      return "ReduceGrad";
    case FailingCall::kStep:
      return "Step";
    case FailingCall::kWaitReady:
      return "WaitReady";
  }
  return "?";
}

// A stand-in daemon for one trainer of W = 1: every unit's parameters and
// gradient slot are 64-byte ranges of one segment (a unit of the test's
// MLP has at most 9 floats). `failing` answers DATA_LOSS, marked as the
// job's when `marked`. Thread-safe (nothing mutable after construction).
class FakeDaemon final : public v1::Trainer::Service {
 public:
  FakeDaemon(const memory::SharedMemorySegment* segment, FailingCall failing,
             bool marked)
      : segment_(segment), failing_(failing), marked_(marked) {}

  grpc::Status RegisterModel(grpc::ServerContext* context,
                             const v1::RegisterModelRequest*,
                             v1::RegisterModelResponse* response) override {
    if (failing_ == FailingCall::kRegisterModel) return JobFailed(context);
    response->set_epoch(1);
    response->set_committed_step(0);
    response->mutable_topology()->set_rank(0);
    response->mutable_topology()->set_world_size(1);
    response->mutable_topology()->set_sharding_factor(1);
    return grpc::Status::OK;
  }

  grpc::Status Gather(grpc::ServerContext* context,
                      const v1::GatherRequest* request,
                      v1::GatherResponse* response) override {
    const bool backward = request->pass() == v1::PASS_BACKWARD;
    if (failing_ == (backward ? FailingCall::kGatherBackward
                              : FailingCall::kGatherForward)) {
      return JobFailed(context);
    }
    Fill(response->mutable_params(), 128 * request->unit());
    if (backward) {
      Fill(response->mutable_grad_buffer(), 128 * request->unit() + 64);
    }
    response->set_epoch(1);
    return grpc::Status::OK;
  }

  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest*,
                       v1::ReleaseResponse* response) override {
    if (failing_ == FailingCall::kRelease) return JobFailed(context);
    response->set_was_gathered(true);
    return grpc::Status::OK;
  }

  grpc::Status ReduceGrad(grpc::ServerContext* context,
                          const v1::ReduceGradRequest* request,
                          v1::ReduceGradResponse* response) override {
    if (failing_ == FailingCall::kReduceGrad) return JobFailed(context);
    response->set_reduce_started(true);
    response->set_released(request->release());
    return grpc::Status::OK;
  }

  grpc::Status Step(grpc::ServerContext* context,
                    const v1::StepRequest* request,
                    v1::StepResponse* response) override {
    if (failing_ == FailingCall::kStep) return JobFailed(context);
    if (failing_ == FailingCall::kWaitReady) {
      return grpc::Status(grpc::StatusCode::ABORTED,
                          "Step failed in epoch 1: a peer exited");
    }
    response->set_committed_step(request->step());
    response->set_epoch(1);
    return grpc::Status::OK;
  }

  grpc::Status WaitReady(grpc::ServerContext* context,
                         const v1::WaitReadyRequest*,
                         v1::WaitReadyResponse*) override {
    return JobFailed(context);
  }

 private:
  grpc::Status JobFailed(grpc::ServerContext* context) const {
    if (marked_) context->AddTrailingMetadata(rpc::kJobFailedTrailer, "1");
    return grpc::Status(grpc::StatusCode::DATA_LOSS,
                        "the job has failed: shard 0 at step 0 is lost");
  }

  void Fill(v1::DataRef* ref, int64_t offset) const {
    v1::SharedMemoryRef* shm = ref->mutable_shared_memory();
    shm->set_path(segment_->path());
    shm->set_segment_bytes(segment_->size());
    shm->set_byte_offset(offset);
    shm->set_byte_length(64);
    ref->set_dtype(v1::DTYPE_FP32);
    ref->set_byte_length(64);
  }

  const memory::SharedMemorySegment* const segment_;
  const FailingCall failing_;
  const bool marked_;
};

struct ExitCase {
  FailingCall failing;
  bool marked;
  int exit_status;
};

std::ostream& operator<<(std::ostream& os, const ExitCase& c) {
  return os << Name(c.failing) << (c.marked ? " marked" : " unmarked") << " -> "
            << c.exit_status;
}

class ExampleTrainerExitTest : public ::testing::TestWithParam<ExitCase> {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/example_trainer_exit_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto segment = memory::SharedMemorySegment::Create(dir_, "seg", 4096);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_.emplace(std::move(*segment));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    daemon_.reset();
    segment_.reset();
    unlink(socket().c_str());
    rmdir(dir_.c_str());
  }

  std::string socket() const { return absl::StrCat(dir_, "/shardd.sock"); }

  void StartDaemon(FailingCall failing, bool marked) {
    daemon_ = std::make_unique<FakeDaemon>(&*segment_, failing, marked);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", socket()),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(daemon_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  // Trains one step of a 2-3-2 MLP (two units) through the fake daemon;
  // the trainer's exit status.
  absl::StatusOr<int> RunTrainer() {
    absl::StatusOr<std::unique_ptr<Subprocess>> trainer = Subprocess::Spawn(
        {g_trainer_binary, absl::StrCat("--socket=", socket()),
         "--widths=2,3,2", "--batch_per_rank=2", "--steps=1",
         "--rpc_timeout_ms=20000", "--ready_timeout_ms=20000"},
        "example_trainer");
    if (!trainer.ok()) return trainer.status();
    // Generous: the trainer waits for nothing but the fake daemon's
    // immediate answers, yet the machine may be loaded.
    return (*trainer)->Wait(absl::Now() + absl::Seconds(60));
  }

  std::string dir_;
  std::optional<memory::SharedMemorySegment> segment_;
  std::unique_ptr<FakeDaemon> daemon_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_P(ExampleTrainerExitTest, ExitStatusSaysWhetherTheJobFailed) {
  const ExitCase c = GetParam();
  StartDaemon(c.failing, c.marked);
  absl::StatusOr<int> status = RunTrainer();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, c.exit_status) << c;
}

// The trainer may start before its daemon listens (a sidecar or a
// supervisor starting both at once): it waits for it, up to
// --ready_timeout_ms, instead of exiting at the first refused connection.
using ExampleTrainerStartTest = ExampleTrainerExitTest;

TEST_F(ExampleTrainerStartTest, WaitsForADaemonThatStartsLater) {
  absl::StatusOr<std::unique_ptr<Subprocess>> trainer =
      Subprocess::Spawn({g_trainer_binary, absl::StrCat("--socket=", socket()),
                         "--widths=2,3,2", "--batch_per_rank=2", "--steps=1",
                         "--rpc_timeout_ms=20000", "--ready_timeout_ms=60000"},
                        "example_trainer");
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<std::string> waiting =
      (*trainer)->WaitForLine("waiting for the shardd daemon at unix:",
                              absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  StartDaemon(FailingCall::kNone, true);
  absl::StatusOr<int> status =
      (*trainer)->Wait(absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0);
}

TEST_F(ExampleTrainerStartTest, GivesUpOnADaemonThatNeverStarts) {
  absl::StatusOr<std::unique_ptr<Subprocess>> trainer =
      Subprocess::Spawn({g_trainer_binary, absl::StrCat("--socket=", socket()),
                         "--widths=2,3,2", "--batch_per_rank=2", "--steps=1",
                         "--rpc_timeout_ms=2000", "--ready_timeout_ms=2000"},
                        "example_trainer");
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<int> status =
      (*trainer)->Wait(absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 1);
}

constexpr int kFailed = core::kExitJobFailed;

INSTANTIATE_TEST_SUITE_P(
    EveryCallOfAStep, ExampleTrainerExitTest,
    ::testing::Values(
        // The fake serves a whole step: the trainer finishes.
        ExitCase{FailingCall::kNone, true, 0},
        // The job's failure, marked, from any call: exit 3.
        ExitCase{FailingCall::kRegisterModel, true, kFailed},
        ExitCase{FailingCall::kGatherForward, true, kFailed},
        ExitCase{FailingCall::kRelease, true, kFailed},
        ExitCase{FailingCall::kGatherBackward, true, kFailed},
        ExitCase{FailingCall::kReduceGrad, true, kFailed},
        ExitCase{FailingCall::kStep, true, kFailed},
        ExitCase{FailingCall::kWaitReady, true, kFailed},
        // An unmarked DATA_LOSS is the call's own error: exit 1.
        ExitCase{FailingCall::kReduceGrad, false, 1},
        ExitCase{FailingCall::kRegisterModel, false, 1}),
    [](const ::testing::TestParamInfo<ExitCase>& info) {
      return absl::StrCat(Name(info.param.failing),
                          info.param.marked ? "Marked" : "Unmarked");
    });

}  // namespace
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s EXAMPLE_TRAINER\n", argv[0]);
    return 2;
  }
  shardd::tests::g_trainer_binary = argv[1];
  return RUN_ALL_TESTS();
}
