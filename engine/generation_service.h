// GenerationService: coil.v1.Generation on gRPC's callback API (docs/serving.md). Generate
// validates and tokenizes on the calling gRPC thread, hands the request to the EngineLoop
// and returns a GenerateReactor that streams the request's RequestStream; no reaction
// blocks and no gRPC thread touches the scheduler or MPI. Every method takes its request as
// raw bytes and parses them itself (engine/request_bytes.h), so that bytes which are not a
// valid request get INVALID_ARGUMENT naming the field, not gRPC's empty UNIMPLEMENTED.
// Included by coil-serve only, so that gRPC headers stay out of the rest of the engine.
#ifndef COIL_ENGINE_GENERATION_SERVICE_H_
#define COIL_ENGINE_GENERATION_SERVICE_H_

#include "coil/v1/generation.grpc.pb.h"
#include "engine/engine_loop.h"
#include "engine/request_validation.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil {

// The callback service with every method on raw bytes.
using RawGenerationService = coil::v1::Generation::WithRawCallbackMethod_Generate<
    coil::v1::Generation::WithRawCallbackMethod_Tokenize<
        coil::v1::Generation::WithRawCallbackMethod_Detokenize<
            coil::v1::Generation::WithRawCallbackMethod_GetModelInfo<
                coil::v1::Generation::Service>>>>;

class GenerationService final : public RawGenerationService {
 public:
  // `static_info` holds the fields of GetModelInfo that never change; the live budgets
  // come from the loop. Every reference must outlive the service. Each Generate call is
  // counted once (EngineLoop::CountOutcome), as its client saw it end.
  GenerationService(EngineLoop& engine, const tokenizer::Tokenizer& tokenizer,
                    const ServingLimits& limits, coil::v1::ModelInfo static_info)
      : engine_(engine),
        tokenizer_(tokenizer),
        limits_(limits),
        static_info_(std::move(static_info)) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  EngineLoop& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  const ServingLimits limits_;
  const coil::v1::ModelInfo static_info_;
};

}  // namespace coil

#endif  // COIL_ENGINE_GENERATION_SERVICE_H_
