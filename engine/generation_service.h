// GenerationService: coil.v1.Generation on gRPC's callback API (docs/serving.md). Generate
// validates and tokenizes on the calling gRPC thread, hands the request to the EngineLoop
// and returns a GenerateReactor that streams the request's RequestStream; no reaction
// blocks and no gRPC thread touches the scheduler or MPI. Included by coil-serve only,
// so that gRPC headers stay out of the rest of the engine.
#ifndef COIL_ENGINE_GENERATION_SERVICE_H_
#define COIL_ENGINE_GENERATION_SERVICE_H_

#include "coil/v1/generation.grpc.pb.h"
#include "engine/engine_loop.h"
#include "engine/metrics/coil_metrics.h"
#include "engine/request_validation.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil {

class GenerationService final : public coil::v1::Generation::CallbackService {
 public:
  // `static_info` holds the fields of GetModelInfo that never change; the live budgets
  // come from the loop. Every reference (and `metrics`, null: none) must outlive the service.
  GenerationService(EngineLoop& engine, const tokenizer::Tokenizer& tokenizer,
                    const ServingLimits& limits, coil::v1::ModelInfo static_info,
                    metrics::CoilMetrics* metrics = nullptr)
      : engine_(engine),
        tokenizer_(tokenizer),
        limits_(limits),
        static_info_(std::move(static_info)),
        metrics_(metrics) {}

  grpc::ServerWriteReactor<coil::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const coil::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const coil::v1::TokenizeRequest* request,
                                     coil::v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const coil::v1::DetokenizeRequest* request,
                                       coil::v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const coil::v1::GetModelInfoRequest* request,
                                         coil::v1::ModelInfo* response) override;

 private:
  EngineLoop& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  const ServingLimits limits_;
  const coil::v1::ModelInfo static_info_;
  metrics::CoilMetrics* metrics_;
};

}  // namespace coil

#endif  // COIL_ENGINE_GENERATION_SERVICE_H_
