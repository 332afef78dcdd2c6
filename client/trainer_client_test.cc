#include "client/trainer_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::client {
namespace {

// A stand-in daemon: Gather hands out a 2-float unit in a segment it owns;
// Release keeps the request it got; WaitReady blocks until the call's
// deadline; Step returns ABORTED.
class FakeTrainer final : public v1::Trainer::Service {
 public:
  explicit FakeTrainer(const memory::SharedMemorySegment* segment)
      : segment_(segment) {}

  grpc::Status Gather(grpc::ServerContext*, const v1::GatherRequest* request,
                      v1::GatherResponse* response) override {
    auto fill = [&](v1::DataRef* ref, int64_t offset) {
      v1::SharedMemoryRef* shm = ref->mutable_shared_memory();
      shm->set_path(segment_->path());
      shm->set_segment_bytes(segment_->size());
      shm->set_byte_offset(offset);
      shm->set_byte_length(8);
      ref->set_dtype(v1::DTYPE_FP32);
      ref->set_byte_length(8);
      v1::TensorView* v = ref->add_views();
      v->set_name("w");
      v->add_shape(2);
      v->set_dtype(v1::DTYPE_FP32);
      v->set_numel(2);
    };
    fill(response->mutable_params(), 8 * request->unit());
    if (request->pass() == v1::PASS_BACKWARD) {
      fill(response->mutable_grad_buffer(), 1024);
    }
    return grpc::Status::OK;
  }
  grpc::Status WaitReady(grpc::ServerContext* context,
                         const v1::WaitReadyRequest*,
                         v1::WaitReadyResponse*) override {
    while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }
  grpc::Status Step(grpc::ServerContext*, const v1::StepRequest*,
                    v1::StepResponse*) override {
    return grpc::Status(grpc::StatusCode::ABORTED, "peer 3 failed");
  }
  // DATA_LOSS: the job's (marked as the daemon marks it) when the request
  // names a load_from of "job", else a corrupt file's.
  grpc::Status RegisterModel(grpc::ServerContext* context,
                             const v1::RegisterModelRequest* request,
                             v1::RegisterModelResponse*) override {
    if (request->load_from() == "cancel") {
      return grpc::Status(grpc::StatusCode::CANCELLED, "CANCELLED");
    }
    if (request->load_from() == "job") {
      context->AddTrailingMetadata(rpc::kJobFailedTrailer, "1");
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          "shard 0 at step 4 is lost");
    }
    return grpc::Status(grpc::StatusCode::DATA_LOSS,
                        "/ckpt/m.safetensors: truncated");
  }
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_release_ = *request;
    response->set_was_gathered(true);
    return grpc::Status::OK;
  }

  v1::ReleaseRequest last_release() const {
    absl::MutexLock lock(&mu_);
    return last_release_;
  }

 private:
  const memory::SharedMemorySegment* segment_;
  mutable absl::Mutex mu_;
  v1::ReleaseRequest last_release_ ABSL_GUARDED_BY(mu_);
};

class TrainerClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/trainer_client_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(rpc::ToGrpcDeadline(MonoNow()));
    server_.reset();
    service_.reset();
    segment_.reset();
    unlink(absl::StrCat(dir_, "/shardd.sock").c_str());
    unlink(absl::StrCat(dir_, "/dead.sock").c_str());
    rmdir(dir_.c_str());
  }

  std::string StartFakeDaemon() {
    auto segment = memory::SharedMemorySegment::Create(dir_, "seg", 4096);
    EXPECT_TRUE(segment.ok()) << segment.status();
    segment_.emplace(std::move(*segment));
    float* f = static_cast<float*>(segment_->mutable_data());
    for (int i = 0; i < 1024; ++i) f[i] = static_cast<float>(i);
    service_ = std::make_unique<FakeTrainer>(&*segment_);
    const std::string target = absl::StrCat("unix:", dir_, "/shardd.sock");
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    return target;
  }

  std::unique_ptr<TrainerClient> Client(const std::string& target) {
    TrainerClientOptions options;
    options.target = target;
    options.default_timeout = absl::Seconds(5);
    auto client = TrainerClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  std::string dir_;
  std::optional<memory::SharedMemorySegment> segment_;
  std::unique_ptr<FakeTrainer> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TrainerClientTest, MissingSocketIsUnavailableNamingTheTarget) {
  auto client = Client(absl::StrCat(dir_, "/shardd.sock"));
  EXPECT_EQ(client->target(), absl::StrCat("unix:", dir_, "/shardd.sock"));
  const MonoTime start = MonoNow();
  auto status = client->GetStatus();
  EXPECT_LT(MonoNow() - start, absl::Seconds(3));  // Fails fast.
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(TrainerClient::IsDaemonUnreachable(status.status()))
      << status.status();
  EXPECT_NE(status.status().message().find(absl::StrCat(
                "no shardd daemon at unix:", dir_, "/shardd.sock")),
            std::string::npos)
      << status.status();
}

TEST_F(TrainerClientTest, SocketWithNoListenerIsUnavailable) {
  // A bound but never listening socket: connect() is refused.
  const std::string path = absl::StrCat(dir_, "/dead.sock");
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  auto client = Client(absl::StrCat("unix:", path));
  auto step = client->Step(1);
  EXPECT_TRUE(TrainerClient::IsDaemonUnreachable(step.status()))
      << step.status();
  EXPECT_FALSE(client->WaitConnected(MonoNow() + absl::Milliseconds(200)).ok());
}

TEST_F(TrainerClientTest, DaemonStatusKeepsItsCodeAndMessage) {
  auto client = Client(StartFakeDaemon());
  auto step = client->Step(1);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(step.status().message(), "peer 3 failed");
  EXPECT_FALSE(TrainerClient::IsDaemonUnreachable(step.status()));
}

TEST_F(TrainerClientTest, ACallTheDaemonCancelledMeansItIsStopping) {
  // A stopping daemon's server answers CANCELLED to the calls it will not
  // run (seen from shardd under SIGTERM: "ReduceGrad(unit 1): CANCELLED",
  // and the example trainer exited 1 instead of re-attaching).
  auto client = Client(StartFakeDaemon());
  v1::RegisterModelRequest request;
  request.set_load_from("cancel");
  auto cancelled = client->RegisterModel(request);
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kUnavailable)
      << cancelled.status();
  EXPECT_TRUE(TrainerClient::IsDaemonUnreachable(cancelled.status()))
      << cancelled.status();
  EXPECT_NE(cancelled.status().message().find(
                "shardd daemon at unix:" + dir_ +
                "/shardd.sock cancelled the call (it is stopping)"),
            std::string::npos)
      << cancelled.status();
}

TEST_F(TrainerClientTest, OnlyTheMarkedDataLossIsTheJobFailing) {
  auto client = Client(StartFakeDaemon());
  v1::RegisterModelRequest request;
  request.set_load_from("/ckpt/m.safetensors");
  auto corrupt = client->RegisterModel(request);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(TrainerClient::IsJobFailed(corrupt.status()))
      << "a corrupt input file is the call's own DATA_LOSS";
  request.set_load_from("job");
  auto failed = client->RegisterModel(request);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(TrainerClient::IsJobFailed(failed.status())) << failed.status();
}

TEST_F(TrainerClientTest, WithContextKeepsTheMarksAndPrefixesTheMessage) {
  auto client = Client(StartFakeDaemon());
  v1::RegisterModelRequest request;
  request.set_load_from("job");
  const absl::Status failed = client->RegisterModel(request).status();
  ASSERT_TRUE(TrainerClient::IsJobFailed(failed)) << failed;
  const absl::Status named =
      TrainerClient::WithContext(failed, "ReduceGrad(unit 1)");
  EXPECT_EQ(named.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(named.message(), "ReduceGrad(unit 1): shard 0 at step 4 is lost");
  EXPECT_TRUE(TrainerClient::IsJobFailed(named))
      << "the job's failure must stay terminal when a caller names the call";

  auto gone = Client(absl::StrCat(dir_, "/nothing.sock"))->Step(1);
  ASSERT_TRUE(TrainerClient::IsDaemonUnreachable(gone.status()))
      << gone.status();
  EXPECT_TRUE(TrainerClient::IsDaemonUnreachable(
      TrainerClient::WithContext(gone.status(), "Step")));

  request.set_load_from("/ckpt/m.safetensors");
  const absl::Status corrupt = client->RegisterModel(request).status();
  EXPECT_FALSE(
      TrainerClient::IsJobFailed(TrainerClient::WithContext(corrupt, "load")))
      << "a DATA_LOSS of the call's own gains no mark";
  EXPECT_TRUE(TrainerClient::WithContext(absl::OkStatus(), "Step").ok());
}

TEST_F(TrainerClientTest, BlockingCallEndsAtItsDeadline) {
  auto client = Client(StartFakeDaemon());
  const MonoTime start = MonoNow();
  auto ready = client->WaitReady(0, MonoNow() + absl::Milliseconds(300));
  const absl::Duration took = MonoNow() - start;
  EXPECT_EQ(ready.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST_F(TrainerClientTest, ReleaseSendsTheWholeRequest) {
  auto client = Client(StartFakeDaemon());
  v1::ReleaseRequest request;
  request.set_unit(2);
  request.set_pass(v1::PASS_FORWARD);
  request.set_reshard(true);
  auto released = client->Release(request);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_TRUE(released->was_gathered());
  EXPECT_EQ(service_->last_release().unit(), 2);
  EXPECT_EQ(service_->last_release().pass(), v1::PASS_FORWARD);
  EXPECT_TRUE(service_->last_release().reshard());
  // The short form keeps the cached copy (reshard = false).
  ASSERT_TRUE(client->Release(1, v1::PASS_BACKWARD).ok());
  EXPECT_EQ(service_->last_release().unit(), 1);
  EXPECT_EQ(service_->last_release().pass(), v1::PASS_BACKWARD);
  EXPECT_FALSE(service_->last_release().reshard());
}

TEST_F(TrainerClientTest, GatherMapsParamsAndGradientSlot) {
  auto client = Client(StartFakeDaemon());
  auto unit = client->Gather(3, v1::PASS_BACKWARD);
  ASSERT_TRUE(unit.ok()) << unit.status();
  ASSERT_EQ(unit->params.tensor("w").size(), 2u);
  EXPECT_EQ(unit->params.tensor("w")[0], 6.0f);  // Byte 24 = float 6.
  ASSERT_TRUE(unit->grad.has_value());
  unit->grad->flat[1] = -1.0f;
  EXPECT_EQ(static_cast<const float*>(segment_->data())[257], -1.0f);
  auto forward = client->Gather(4, v1::PASS_FORWARD);
  ASSERT_TRUE(forward.ok());
  EXPECT_FALSE(forward->grad.has_value());
  // One read-only and one writable mapping of the same file, each once.
  EXPECT_EQ(client->segments().map_count(), 2);
}

TEST_F(TrainerClientTest, AsyncGatherDeliversTheSameViews) {
  auto client = Client(StartFakeDaemon());
  PendingGather pending = client->GatherAsync(1, v1::PASS_FORWARD, {2});
  auto unit = pending.Wait(MonoNow() + absl::Seconds(5));
  ASSERT_TRUE(unit.ok()) << unit.status();
  EXPECT_EQ(unit->unit, 1);
  EXPECT_EQ(unit->params.flat[1], 3.0f);
  EXPECT_FALSE(pending.valid());
  EXPECT_EQ(pending.Wait(MonoNow()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(TrainerClientTest, AsyncGatherAgainstNoDaemonFailsWithinItsDeadline) {
  auto client = Client(absl::StrCat(dir_, "/shardd.sock"));
  PendingGather pending = client->GatherAsync(
      0, v1::PASS_FORWARD, {}, MonoNow() + absl::Milliseconds(500));
  auto unit = pending.Wait(MonoNow() + absl::Seconds(5));
  EXPECT_EQ(unit.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardd::client
