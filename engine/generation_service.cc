#include "engine/generation_service.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/request_bytes.h"
#include "engine/request_stream.h"
#include "engine/status_to_grpc.h"

namespace coil {
namespace {

using coil::v1::GenerateRequest;
using coil::v1::GenerateResponse;

constexpr std::chrono::milliseconds kDeadlineSlack{100};

// Why a call ended before the server finished it, as its client sees it. The client's own
// deadline timer cancels the call too, and its cancellation can arrive a little before this
// server's copy of the deadline (which started when the call arrived): one that close to
// the deadline is the deadline.
absl::Status CallEnded(const grpc::CallbackServerContext& context) {
  if (context.deadline() <= std::chrono::system_clock::now() + kDeadlineSlack) {
    return absl::DeadlineExceededError("the request's deadline passed");
  }
  return absl::CancelledError("the request was cancelled by the client");
}

coil::v1::FinishReason ToProto(StreamFinish reason) {
  switch (reason) {
    case StreamFinish::kLength: return coil::v1::FINISH_REASON_LENGTH;
    case StreamFinish::kStop: return coil::v1::FINISH_REASON_STOP;
    case StreamFinish::kEos: return coil::v1::FINISH_REASON_EOS;
    default: return coil::v1::FINISH_REASON_UNSPECIFIED;
  }
}

// Streams one request's RequestStream (route_guide_callback_server's Lister shape). The
// stream calls Deliver under its lock, at most one delivery per completed write, so
// `response_` is never reused while a write is in flight.
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                              public RequestStream::Listener {
 public:
  GenerateReactor(EngineLoop& engine, const tokenizer::Tokenizer& tokenizer,
                  grpc::CallbackServerContext* context)
      : engine_(engine), tokenizer_(tokenizer), context_(context) {}

  // Refuses the call at once.
  void Refuse(const absl::Status& status) {
    finished_ = true;
    outcome_ = StreamOutcome{StreamFinish::kNone, status.code()};
    Finish(ToGrpcStatus(status));
  }

  // Connects the stream; from here on the engine may deliver.
  void Attach(std::shared_ptr<RequestStream> stream) {
    stream_ = std::move(stream);
    stream_->Attach(this);
  }

  void Deliver(StreamBatch batch) override {
    if (finished_) return;
    if (!batch.error.ok()) {
      finished_ = true;
      outcome_ = StreamOutcome{StreamFinish::kNone, batch.error.code()};
      Finish(ToGrpcStatus(batch.error));
      return;
    }
    response_.Clear();
    // The id once, in the first response: a long id must not multiply the stream's size.
    if (!sent_request_id_) {
      response_.set_request_id(stream_->client_request_id());
      sent_request_id_ = true;
    }
    response_.set_text(std::move(batch.text));
    for (int32_t id : batch.token_ids) response_.add_token_ids(id);
    for (const StreamLogprob& logprob : batch.logprobs) {
      coil::v1::TokenLogprob* out = response_.add_logprobs();
      out->set_token_id(logprob.token_id);
      out->set_logprob(logprob.logprob);
      for (const TokenLogprob& top : logprob.top) {
        coil::v1::TopLogprob* alt = out->add_top();
        alt->set_token_id(top.token_id);
        alt->set_logprob(top.logprob);
        auto text = tokenizer_.Decode({top.token_id});  // valid UTF-8 (U+FFFD for cut bytes)
        if (text.ok()) alt->set_text(*text);
      }
    }
    if (batch.final.has_value()) {
      const StreamFinal& final = *batch.final;
      response_.set_finish_reason(ToProto(final.reason));
      response_.set_matched_stop(final.matched_stop);
      response_.mutable_usage()->set_prompt_tokens(final.prompt_tokens);
      response_.mutable_usage()->set_completion_tokens(final.completion_tokens);
      response_.mutable_usage()->set_cached_prompt_tokens(final.cached_prompt_tokens);
      response_.mutable_timings()->set_queue_seconds(final.queue_seconds);
      response_.mutable_timings()->set_time_to_first_token_seconds(
          final.time_to_first_token_seconds);
      response_.mutable_timings()->set_total_seconds(final.total_seconds);
      finished_ = true;
      outcome_ = StreamOutcome{final.reason, absl::StatusCode::kOk};
      Serialize();
      StartWriteAndFinish(&bytes_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    Serialize();
    StartWrite(&bytes_);
  }

  void OnWriteDone(bool /*ok*/) override {
    // A failed write means the call is gone; OnCancel ends the stream, and the next
    // delivery finishes the call.
    stream_->WriteDone();
  }

  void OnCancel() override {
    // The client cancelled or its deadline passed: end the call now (the stream drops
    // whatever the engine pushes later) and free the row at the next step boundary.
    ended_early_ = CallEnded(*context_);
    if (stream_ == nullptr) return;  // refused before it reached the engine
    StreamBatch cancelled;
    cancelled.error = ended_early_;
    stream_->Push(std::move(cancelled));
    engine_.Cancel(stream_->request_id());
  }

  void OnDone() override {
    // Counted once, here, where gRPC knows whether the status reached the client: a call
    // cancelled (or past its deadline) before the status went out ended for its client
    // with that, whatever the server was about to send.
    if (context_->IsCancelled()) {
      const absl::Status ended = ended_early_.ok() ? CallEnded(*context_) : ended_early_;
      outcome_ = StreamOutcome{StreamFinish::kNone, ended.code()};
    }
    engine_.CountOutcome(outcome_);
    if (stream_ != nullptr) stream_->Detach();
    delete this;  // NOLINT: gRPC's callback API ends a reactor's life here
  }

 private:
  // response_ into bytes_, which the write then owns until it completes.
  void Serialize() {
    bool own_buffer = false;
    bytes_.Clear();
    grpc::SerializationTraits<GenerateResponse>::Serialize(response_, &bytes_, &own_buffer)
        .IgnoreError();  // a message coil built always serializes
  }

  EngineLoop& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  grpc::CallbackServerContext* const context_;
  std::shared_ptr<RequestStream> stream_;
  GenerateResponse response_;
  grpc::ByteBuffer bytes_;
  bool sent_request_id_ = false;  // guarded like finished_
  bool finished_ = false;         // guarded by the stream's lock once attached
  StreamOutcome outcome_;         // what the status sent says, set with finished_
  absl::Status ended_early_;      // how the call ended, when OnCancel came
};

// The request as plain values, its prompt tokenized.
absl::StatusOr<GenerationInput> ToInput(const GenerateRequest& request,
                                        const tokenizer::Tokenizer& tokenizer,
                                        const ServingLimits& limits) {
  GenerationInput input;
  switch (request.prompt_case()) {
    case GenerateRequest::kText: {
      COIL_RETURN_IF_ERROR(ValidateText("the prompt text", request.text(), limits));
      auto ids = tokenizer.Encode(request.text(), request.add_special_tokens());
      if (!ids.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("the prompt text: ", ids.status().message()));
      }
      input.prompt = std::move(ids).value();
      break;
    }
    case GenerateRequest::kTokenIds:
      input.prompt.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    default:
      break;  // empty: refused by validation
  }
  const coil::v1::SamplingParams& sampling = request.sampling();
  input.sampling.temperature = sampling.temperature();
  input.sampling.top_k = sampling.top_k();
  input.sampling.top_p = sampling.has_top_p() ? sampling.top_p() : 1.0f;
  input.sampling.min_p = sampling.min_p();
  input.sampling.presence_penalty = sampling.presence_penalty();
  input.sampling.frequency_penalty = sampling.frequency_penalty();
  input.sampling.repetition_penalty =
      sampling.repetition_penalty() == 0.0f ? 1.0f : sampling.repetition_penalty();
  input.sampling.seed = sampling.seed();
  input.sampling.logprobs = sampling.logprobs();
  input.sampling.top_logprobs = sampling.top_logprobs();
  if (sampling.has_max_tokens()) input.max_tokens = sampling.max_tokens();
  input.stop.assign(sampling.stop().begin(), sampling.stop().end());
  input.stop_token_ids.assign(sampling.stop_token_ids().begin(), sampling.stop_token_ids().end());
  input.ignore_eos = sampling.ignore_eos();
  input.cache_prefix_tokens = request.cache_prefix_tokens();
  return input;
}

// Serializes a unary response into the call's response bytes.
void Reply(const google::protobuf::Message& message, grpc::ByteBuffer* response) {
  bool own_buffer = false;
  grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(message, response,
                                                                            &own_buffer)
      .IgnoreError();  // a message coil built always serializes
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  auto* reactor = new GenerateReactor(engine_, tokenizer_, context);  // NOLINT: deleted in OnDone
  auto refuse = [&](const absl::Status& status) {
    reactor->Refuse(status);  // counted when the call is done
    return reactor;
  };
  // A call that ended before gRPC read its message (cancelled, or past its deadline, while
  // it waited in gRPC's queue on a busy server) reaches this handler with no message at
  // all. It is counted as the client saw it end, not as an empty request.
  if (!bytes->Valid() || context->IsCancelled()) return refuse(CallEnded(*context));
  GenerateRequest request;
  if (const absl::Status parsed = ParseRequestBuffer(*bytes, request); !parsed.ok()) {
    LogMalformedRequest("Generate", parsed);
    return refuse(parsed);
  }
  if (const absl::Status open = engine_.CheckAccepting(); !open.ok()) return refuse(open);
  if (const absl::Status id = ValidateRequestId(request.request_id(), limits_); !id.ok()) {
    return refuse(id);
  }
  absl::StatusOr<GenerationInput> input = ToInput(request, tokenizer_, limits_);
  const absl::Status valid = input.ok() ? ValidateGeneration(*input, limits_) : input.status();
  if (!valid.ok()) return refuse(valid);
  // A call read after its deadline (a busy server reads calls late) is not queued: its
  // client has stopped waiting, and a refusal for any other reason would be counted as
  // that reason while the client sees DEADLINE_EXCEEDED.
  if (context->deadline() <= std::chrono::system_clock::now()) {
    return refuse(absl::DeadlineExceededError(
        "the request's deadline passed before the server read it; allow it more time"));
  }
  const uint64_t id = engine_.NextRequestId();
  std::string client_id =
      request.request_id().empty() ? absl::StrCat("coil-", id) : request.request_id();
  auto stream = std::make_shared<RequestStream>(id, std::move(client_id));
  reactor->Attach(stream);
  // A refusal (draining, failed) ends the stream, which finishes the call.
  engine_.Submit(std::move(stream), std::move(input).value()).IgnoreError();
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* bytes,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  coil::v1::TokenizeRequest request;
  absl::Status status = ParseRequestBuffer(*bytes, request);
  if (!status.ok()) LogMalformedRequest("Tokenize", status);
  if (status.ok()) status = ValidateText("the text", request.text(), limits_);
  absl::StatusOr<std::vector<int32_t>> ids =
      status.ok() ? tokenizer_.Encode(request.text(), request.add_special_tokens()) : status;
  if (!ids.ok()) {
    reactor->Finish(ToGrpcStatus(ids.status()));
    return reactor;
  }
  coil::v1::TokenizeResponse out;
  for (int32_t id : *ids) out.add_token_ids(id);
  Reply(out, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* bytes,
                                                        grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  coil::v1::DetokenizeRequest request;
  if (const absl::Status parsed = ParseRequestBuffer(*bytes, request); !parsed.ok()) {
    LogMalformedRequest("Detokenize", parsed);
    reactor->Finish(ToGrpcStatus(parsed));
    return reactor;
  }
  std::vector<int32_t> ids(request.token_ids().begin(), request.token_ids().end());
  auto text = tokenizer_.Decode(ids, request.skip_special_tokens());
  if (!text.ok()) {
    reactor->Finish(ToGrpcStatus(text.status()));
    return reactor;
  }
  coil::v1::DetokenizeResponse out;
  out.set_text(std::move(text).value());
  Reply(out, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* bytes,
                                                          grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  coil::v1::GetModelInfoRequest request;
  if (const absl::Status parsed = ParseRequestBuffer(*bytes, request); !parsed.ok()) {
    LogMalformedRequest("GetModelInfo", parsed);
    reactor->Finish(ToGrpcStatus(parsed));
    return reactor;
  }
  coil::v1::ModelInfo info = static_info_;
  const EngineSnapshot snapshot = engine_.Snapshot();
  info.set_state_rows_total(snapshot.rows_total);
  info.set_state_rows_free(snapshot.rows_free);
  info.set_kv_pages_total(snapshot.pages_total);
  info.set_kv_pages_free(snapshot.pages_free);
  info.set_waiting_requests(snapshot.waiting);
  info.set_running_requests(snapshot.running);
  info.set_prefix_cache_rows(snapshot.prefix_cache_rows);
  info.set_prefix_cache_pages(snapshot.prefix_cache_pages);
  Reply(info, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace coil
