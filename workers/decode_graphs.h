// DecodeGraphs: decode-only steps replayed as backend graphs (CUDA graphs), one per
// batch-size bucket, for the runner. A decode-only step of n sequences is padded to its
// power-of-two bucket with scratch-row entries and replays the bucket's graph, captured on
// first use on a batch of scratch-row entries only (so capturing never touches a live
// request's state), after an eager warm-up run without collectives. Every address a graph
// reads (weights, the model's step scratch and metadata block, the state pool) is fixed while
// it is current: a scratch growth (Model::scratch_generation) or another pool drops the
// graphs, and a capture that fails leaves this rank running padded steps op by op (every
// rank pads alike, so the collectives match either way). A model with attention layers runs
// every step op by op: its steps' block tables and context lengths change what the
// attention ops read, which a replay cannot follow yet.
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
  // debugging: --cuda-graphs=false). `model` must outlive this.
  DecodeGraphs(model::Model& model, bool enabled) : model_(model), enabled_(enabled) {}

  // Whether decode-only steps are padded and replayed (never for a model with attention);
  // the same on every rank.
  bool enabled() const;
  void set_enabled(bool enabled) { enabled_ = enabled; }
  // Whether `meta` runs through Run: graphs enabled and every sequence one resumed token.
  bool Takes(const StepMetadata& meta) const { return enabled() && IsDecodeOnly(meta); }
  // Runs a decode-only step through its bucket's graph (captured here when missing or
  // stale) and returns how many rows of the model's logits hold the sampled rows' logits,
  // in meta's order.
  absl::StatusOr<int64_t> Run(const StepMetadata& meta, StatePool& pool);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  // The operations the graph of `num_seqs` sequences' bucket launches per replay, or 0 while
  // that bucket has no graph.
  int64_t nodes(int64_t num_seqs) const;

 private:
  // Captures the graph of `bucket` on scratch-row entries.
  absl::Status Capture(int64_t bucket, StatePool& pool);

  struct Graph {
    std::unique_ptr<Backend::Graph> graph;
    uint64_t scratch_generation = 0;
  };
  // The pool the graphs were captured on: its two state buffers and its row count fix
  // every per-layer state address a graph reads (a new pool may reuse one base address).
  struct PoolIdentity {
    const void* conv = nullptr;
    const void* ssm = nullptr;
    int64_t state_rows = -1;
    bool operator==(const PoolIdentity&) const = default;
  };

  model::Model& model_;
  bool enabled_;
  bool capture_failed_ = false;  // this rank runs padded decode steps eagerly from then on
  PoolIdentity pool_;
  std::vector<Graph> graphs_;  // by log2(bucket)
  int64_t captures_ = 0;
  int64_t replays_ = 0;
};

}  // namespace coil

#endif  // COIL_WORKERS_DECODE_GRAPHS_H_
