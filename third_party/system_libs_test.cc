// Proves that the system library targets in system_libs.BUILD compile and
// link together and do real work: Gloo over TCP on loopback, a prometheus-cpp
// registry serialized to the text format, a gRPC server bound to a port.
// Each later layer relies on these; a broken package shows up here first.

#include <memory>
#include <thread>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace shardd {
namespace {

TEST(SystemLibsTest, GlooAllreducesOverTcpLoopback) {
  constexpr int kWorld = 2;
  gloo::rendezvous::HashStore store;
  std::vector<std::vector<float>> data(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    data[rank] = {1.0f * (rank + 1), 10.0f * (rank + 1)};
    ranks.emplace_back([&, rank] {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
      context->setTimeout(std::chrono::seconds(30));
      context->connectFullMesh(store, device);
      gloo::AllreduceOptions opts(context);
      opts.setInput(data[rank].data(), data[rank].size());
      opts.setOutput(data[rank].data(), data[rank].size());
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(
              &gloo::sum<float>));
      gloo::allreduce(opts);
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(data[rank], (std::vector<float>{3.0f, 30.0f}));
  }
}

TEST(SystemLibsTest, PrometheusSerializesACounter) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter()
                     .Name("shardd_smoke_total")
                     .Help("A counter for the linkage test.")
                     .Register(registry);
  family.Add({}).Increment(3);
  const std::string text =
      prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("shardd_smoke_total 3"), std::string::npos) << text;
}

TEST(SystemLibsTest, GrpcServerBindsWithHealthService) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(port, 0);
  EXPECT_NE(server->GetHealthCheckService(), nullptr);
  server->Shutdown();
}

}  // namespace
}  // namespace shardd
