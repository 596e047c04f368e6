// The public API compiles to messages and a gRPC service with the four RPCs clients use,
// and a request survives the wire format unchanged.
#include <string>

#include "coil/v1/generation.grpc.pb.h"
#include "coil/v1/generation.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "gtest/gtest.h"

namespace coil {
namespace {

TEST(GenerationProtoTest, RequestRoundTripsThroughWireFormat) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(12092);
  request.mutable_token_ids()->add_ids(50276);
  request.mutable_sampling()->set_max_tokens(16);
  request.mutable_sampling()->set_seed(0);  // explicit presence of a zero seed survives
  request.mutable_sampling()->add_stop("\n\n");
  request.set_request_id("r-1");
  std::string wire;
  ASSERT_TRUE(request.SerializeToString(&wire));

  v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  ASSERT_EQ(parsed.prompt_case(), v1::GenerateRequest::kTokenIds);
  ASSERT_EQ(parsed.token_ids().ids_size(), 2);
  EXPECT_EQ(parsed.token_ids().ids(1), 50276);
  EXPECT_EQ(parsed.sampling().max_tokens(), 16);
  EXPECT_TRUE(parsed.sampling().has_seed());
  EXPECT_EQ(parsed.sampling().stop(0), "\n\n");
  EXPECT_EQ(parsed.request_id(), "r-1");
}

TEST(GenerationProtoTest, ServiceDescribesItsMethods) {
  const google::protobuf::ServiceDescriptor* service =
      v1::GenerateRequest::descriptor()->file()->FindServiceByName("Generation");
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(service->full_name(), "coil.v1.Generation");
  const google::protobuf::MethodDescriptor* generate = service->FindMethodByName("Generate");
  ASSERT_NE(generate, nullptr);
  EXPECT_TRUE(generate->server_streaming());
  EXPECT_FALSE(generate->client_streaming());
  for (const char* name : {"Tokenize", "Detokenize", "GetModelInfo"}) {
    const auto* method = service->FindMethodByName(name);
    ASSERT_NE(method, nullptr) << name;
    EXPECT_FALSE(method->server_streaming()) << name;
  }
  EXPECT_EQ(grpc::health::v1::HealthCheckResponse::descriptor()->full_name(),
            "grpc.health.v1.HealthCheckResponse");
}

}  // namespace
}  // namespace coil
