// DecodeGraphs: decode-only steps replayed as backend graphs (CUDA graphs), one per
// batch-size bucket, for the runner. A decode-only step of n sequences is padded to its
// power-of-two bucket with scratch-row entries (and, with attention layers, scratch-page
// block tables) and replays the bucket's graph, captured on first use on a batch of scratch
// entries only (so capturing never touches a live request's state or KV pages), after an
// eager warm-up run without collectives. Every address a graph reads (weights, the model's
// step scratch and metadata block, the state pool, the KV cache) is fixed while it is
// current: a scratch growth (Model::scratch_generation) or another pool or cache drops the
// graphs, and a capture that fails leaves this rank running padded steps op by op (every
// rank pads alike, so the collectives match either way).
// With attention layers a graph serves every context up to its capacity (max_context
// positions per sequence) without recapture: the step's block tables, context lengths and
// KV write positions are words of the metadata block that the kernels read on the device,
// uploaded before each replay at offsets that depend only on the bucket (the block table
// last); the decode attention grid spans the capacity and its blocks past a sequence's own
// context return at once. A step with a longer context runs op by op.
#ifndef COIL_WORKERS_DECODE_GRAPHS_H_
#define COIL_WORKERS_DECODE_GRAPHS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/state_pool.h"
#include "workers/model/model.h"
#include "workers/model/step_metadata.h"

namespace coil {

class DecodeGraphs {
 public:
  // `enabled`: replay where the backend records graphs and the model's communicator can be
  // captured (one rank, or device memory: NCCL); false runs every step op by op (for
  // debugging: --cuda-graphs=false). `max_context`: for a model with attention layers, the
  // most positions a sequence holds in a step a graph replays (the graphs' capacity; it
  // sizes their block tables, attention grid and scratch); ignored without attention.
  // `model` must outlive this.
  DecodeGraphs(model::Model& model, bool enabled, int32_t max_context = 0)
      : model_(model), enabled_(enabled), max_context_(max_context) {}

  // Whether decode-only steps are padded and replayed; the same on every rank.
  bool enabled() const;
  void set_enabled(bool enabled) { enabled_ = enabled; }
  int32_t max_context() const { return max_context_; }
  // Whether `meta` runs through Run: graphs enabled, every sequence one resumed token and,
  // with attention layers, every context within max_context (decided from the plan alone,
  // so the same on every rank).
  bool Takes(const StepMetadata& meta) const;
  // Runs a decode-only step through its bucket's graph (captured here when missing or
  // stale) and returns how many rows of the model's logits hold the sampled rows' logits,
  // in meta's order. `caches.kv` must be the runner's KV cache for a model with attention.
  absl::StatusOr<int64_t> Run(const StepMetadata& meta, const model::RankCaches& caches);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  // The operations the graph of `num_seqs` sequences' bucket launches per replay, or 0 while
  // that bucket has no graph.
  int64_t nodes(int64_t num_seqs) const;

 private:
  // Captures the graph of `bucket` on scratch entries, after a warm-up on `warm_up` of
  // them (the largest bucket, so that no op scratch grows after the first capture).
  absl::Status Capture(int64_t bucket, int64_t warm_up, const model::RankCaches& caches);
  // The scratch batch of `bucket` entries, with the graphs' capacity as its max_context.
  StepMetadata ScratchBatch(int64_t bucket, const model::RankCaches& caches) const;

  struct Graph {
    std::unique_ptr<Backend::Graph> graph;
    uint64_t scratch_generation = 0;
  };
  // The pool and KV cache the graphs were captured on: the two state buffers, the row
  // count, the first attention layer's K and V and the page count fix every per-layer
  // address a graph reads (a new pool or cache may reuse one base address).
  struct PoolIdentity {
    const void* conv = nullptr;
    const void* ssm = nullptr;
    int64_t state_rows = -1;
    const void* k = nullptr;
    const void* v = nullptr;
    int64_t pages = -1;
    bool operator==(const PoolIdentity&) const = default;
  };

  model::Model& model_;
  bool enabled_;
  int32_t max_context_;
  bool capture_failed_ = false;  // this rank runs padded decode steps eagerly from then on
  PoolIdentity pool_;
  std::vector<Graph> graphs_;  // by log2(bucket)
  int64_t captures_ = 0;
  int64_t replays_ = 0;
};

}  // namespace coil

#endif  // COIL_WORKERS_DECODE_GRAPHS_H_
