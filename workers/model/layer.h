// Layer: one block's mixer, the unit a model is a list of. The model runs every block as
//   residual += previous block's output; x = RMSNorm(residual) * norm    (the model, fused)
//   out = mixer(x)                                                      (Layer::Forward)
//   out summed over the tensor-parallel ranks                           (the model)
// since every mixer ends in a row-parallel matmul. A layer holds its own weights (this
// rank's slices, read by weights.h) and reads and writes per-sequence state only through the
// step's caches: a Mamba2 mixer its recurrent-state rows, attention its KV pages. A new
// block kind is a new Layer.
#ifndef COIL_WORKERS_MODEL_LAYER_H_
#define COIL_WORKERS_MODEL_LAYER_H_

#include <cstdint>

#include "kernels/kv_cache.h"
#include "kernels/paged_kv_batch.h"
#include "kernels/recurrent_batch.h"
#include "kernels/state_pool.h"
#include "kernels/tensor.h"
#include "workers/model/model_config.h"
#include "workers/model/step_context.h"

namespace coil::model {

// The activations a step lends every layer in turn: f32 buffers of [rows, width] whose
// widths the layers declare (Layer::scratch; the model sizes each for the widest), and
// `rows16`, the bf16 rows a layer's matmuls take with bf16 weights (the model's block norm
// writes them too). Each layer uses them as it likes; nothing survives to the next layer.
struct LayerScratch {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  float* d = nullptr;
  void* rows16 = nullptr;
};
// Floats per row of each f32 buffer, and bf16 elements per row of rows16.
struct ScratchWidths {
  int64_t a = 0, b = 0, c = 0, d = 0, rows16 = 0;
};

// What one step gives every layer.
struct LayerStep {
  int64_t rows = 0;                        // tokens of the step, packed
  const RecurrentBatch* batch = nullptr;   // the sequences' runs and state rows
  StatePool* states = nullptr;             // recurrent state of the recurrent layers
  const PagedKvBatch* kv = nullptr;        // the sequences' KV pages (attention models)
  KvCache* kv_cache = nullptr;             // K and V of the attention layers
  bool one_token_runs = false;             // every sequence runs one token
  bool fused_mixer = true;                 // such steps may take fused ops
  LayerScratch scratch;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual LayerKind kind() const = 0;
  // The scratch this layer needs per row of a step.
  virtual ScratchWidths scratch() const = 0;
  // out = this rank's part of the mixer's output for the step's rows. x: the block norm's
  // output [rows, D], bf16 with bf16 weights (what the first matmul would round it to);
  // out: f32 [rows, D], summed over the ranks by the caller. Ops go through `ctx`, which
  // keeps the first failure; collectives go through ctx.AllReduce on every rank.
  virtual void Forward(StepContext& ctx, const LayerStep& step, const Tensor& x,
                       const Tensor& out) const = 0;
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_LAYER_H_
