#include "engine/client/client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "coil/v1/generation.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace coil {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

void CancelToken::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

void CancelToken::Bind(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  context_ = context;
  if (cancelled_) context_->TryCancel();
}

void CancelToken::Unbind() {
  std::lock_guard<std::mutex> lock(mu_);
  context_ = nullptr;
}

struct Client::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<coil::v1::Generation::Stub> generation;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

Client::Client(std::unique_ptr<Stubs> stubs) : stubs_(std::move(stubs)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        std::chrono::milliseconds timeout) {
  auto stubs = std::make_unique<Stubs>();
  stubs->channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!stubs->channel->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", target, " within ",
                                               timeout.count(), " ms; is coil-serve running there?"));
  }
  stubs->generation = coil::v1::Generation::NewStub(stubs->channel);
  stubs->health = grpc::health::v1::Health::NewStub(stubs->channel);
  return std::unique_ptr<Client>(new Client(std::move(stubs)));
}

absl::StatusOr<Generation> Client::Generate(const coil::v1::GenerateRequest& request,
                                            const ResponseCallback& on_response,
                                            const CallOptions& options) {
  grpc::ClientContext context;
  if (options.timeout.has_value()) {
    context.set_deadline(std::chrono::system_clock::now() + *options.timeout);
  }
  if (options.cancel != nullptr) options.cancel->Bind(&context);
  Generation generation;
  std::unique_ptr<grpc::ClientReader<coil::v1::GenerateResponse>> reader =
      stubs_->generation->Generate(&context, request);
  coil::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    ++generation.num_responses;
    generation.text += response.text();
    generation.token_ids.insert(generation.token_ids.end(), response.token_ids().begin(),
                                response.token_ids().end());
    for (const auto& logprob : response.logprobs()) generation.logprobs.push_back(logprob);
    if (response.finish_reason() != coil::v1::FINISH_REASON_UNSPECIFIED) {
      generation.final = response;
    }
    if (on_response && !on_response(response)) context.TryCancel();
  }
  const grpc::Status status = reader->Finish();
  if (options.cancel != nullptr) options.cancel->Unbind();
  if (!status.ok()) return FromGrpc(status);
  return generation;
}

absl::StatusOr<coil::v1::ModelInfo> Client::Info() {
  grpc::ClientContext context;
  coil::v1::ModelInfo info;
  const grpc::Status status =
      stubs_->generation->GetModelInfo(&context, coil::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return FromGrpc(status);
  return info;
}

absl::StatusOr<std::vector<int32_t>> Client::Tokenize(const std::string& text,
                                                      bool add_special_tokens) {
  grpc::ClientContext context;
  coil::v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_special_tokens(add_special_tokens);
  coil::v1::TokenizeResponse response;
  const grpc::Status status = stubs_->generation->Tokenize(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end());
}

absl::StatusOr<std::string> Client::Detokenize(const std::vector<int32_t>& ids,
                                               bool skip_special_tokens) {
  grpc::ClientContext context;
  coil::v1::DetokenizeRequest request;
  for (int32_t id : ids) request.add_token_ids(id);
  request.set_skip_special_tokens(skip_special_tokens);
  coil::v1::DetokenizeResponse response;
  const grpc::Status status = stubs_->generation->Detokenize(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response.text();
}

absl::StatusOr<bool> Client::Health(const std::string& service) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stubs_->health->Check(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace coil
