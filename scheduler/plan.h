// The contract between the scheduler (rank 0) and every worker rank: what one forward step
// computes (StepPlan) and what rank 0 sends back (StepResult). Plain structs of vectors and
// scalars, no pointers, so that they map one to one onto step.proto. Invariant: sequences are
// packed decodes first (one token each, never fresh), then prefill chunks; no state slot
// and no KV page appears twice among the sequences; a restore's target is its sequence's
// slot, and a snapshot's target is no sequence's slot.
#ifndef COIL_SCHEDULER_PLAN_H_
#define COIL_SCHEDULER_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace coil {

// How the next token of a request is drawn. Defaults are "greedy, no penalties".
struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int32_t top_k = 0;         // 0: disabled
  float top_p = 1.0f;        // 1: disabled
  float min_p = 0.0f;        // 0: disabled
  // Presence and frequency penalties count the output tokens only; the repetition
  // penalty counts prompt and output tokens (the OpenAI and vLLM conventions).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1: disabled
  // The counter-based RNG key (docs/ARCHITECTURE.md §5); the engine draws one when the
  // client gave none, so that a recompute after preemption still samples the same tokens.
  uint64_t seed = 0;
  bool logprobs = false;     // return the sampled token's logprob
  int32_t top_logprobs = 0;  // return this many most likely alternatives

  // Whether the sampler needs the request's token history (ScheduledSequence::history).
  bool HasPenalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// One sequence's share of a step: a contiguous run of its tokens.
struct ScheduledSequence {
  uint64_t request_id = 0;
  int32_t state_slot = 0;  // its recurrent-state row, owned for the request's whole life
  // Start from zero state and never read the slot: the first chunk of a prompt, or of a
  // recompute after preemption. Only then is start_position 0.
  bool fresh = false;
  std::vector<int32_t> token_ids;  // the run, token_ids.size() >= 1
  int32_t start_position = 0;      // tokens of this sequence already computed before the run
  // Pages of block_size tokens holding K/V for every attention layer; position p lives in
  // page kv_block_table[p / block_size]. Covers start_position + token_ids.size() tokens.
  // Empty when the model has no attention layers.
  std::vector<int32_t> kv_block_table;
  // Sample after the run's last token (decodes and the last piece of a prompt or recompute).
  bool sample = false;
  SamplingParams sampling;  // meaningful when sample is set
  // Index of the output token being sampled (0 for the first). A recompute after
  // preemption samples the same index with the same seed, so it draws the same numbers.
  int32_t rng_step = 0;
  // Penalties need the tokens seen so far. Only when sample is set and
  // sampling.HasPenalties(): the prompt followed by the outputs so far; the first
  // num_prompt_tokens of it are the prompt. Empty otherwise, so penalty-free requests
  // cost nothing.
  std::vector<int32_t> history;
  int32_t num_prompt_tokens = 0;
};

// A copy of one state row over another (the conv and SSM state of every Mamba layer), on
// every rank of its own shard: the prefix cache's snapshots are taken and restored so.
struct StateCopy {
  int32_t from_slot = 0;
  int32_t to_slot = 0;
};

struct StepPlan {
  uint64_t step_id = 0;  // increases by one per plan, from 1
  // End the workers: no sequences, nothing to compute.
  bool shutdown = false;
  // sequences[0, num_decodes) are decodes (one token, not fresh); the rest are prefill
  // chunks. Tokens are packed varlen in this order.
  std::vector<ScheduledSequence> sequences;
  int32_t num_decodes = 0;
  // Run in order before the forward pass: a sequence that resumes from a cached prefix
  // gets the snapshot's state in its own row (and starts there, not fresh). A source may
  // be a row this plan hands to a later sequence: it is read before anything writes it.
  std::vector<StateCopy> restores;
  // Run in order after the forward pass: a sequence's row, at the end of its run, copied
  // to a row the prefix cache keeps as the snapshot of that prefix.
  std::vector<StateCopy> snapshots;

  int32_t NumTokens() const {
    int32_t total = 0;
    for (const ScheduledSequence& sequence : sequences) {
      total += static_cast<int32_t>(sequence.token_ids.size());
    }
    return total;
  }
};

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// The token drawn for one sampled sequence of the plan.
struct SampledToken {
  uint64_t request_id = 0;
  int32_t token_id = 0;
  float logprob = 0.0f;                    // set when sampling.logprobs or top_logprobs > 0
  std::vector<TokenLogprob> top_logprobs;  // sampling.top_logprobs entries, most likely first
};

struct StepResult {
  uint64_t step_id = 0;  // the plan's step_id
  // false when any rank failed the step; then tokens is empty and every request of the
  // plan fails with INTERNAL carrying `error`.
  bool ok = true;
  // Set with !ok when the ranks could not even agree on the outcome (the plan broadcast or
  // the step-status exchange failed): no later step can run on these ranks.
  bool fatal = false;
  int32_t failed_rank = -1;
  std::string error;                 // e.g. "rank 2: ssm_scan: slot 9 out of range [0, 8)"
  std::vector<SampledToken> tokens;  // one per sampled sequence, in plan order
};

// A plan of one sequence (request 1 on state row 0): tokens[begin, begin + count), fresh
// when it starts at 0, a decode when it is one token of a sequence under way, sampled when
// `sample` is set, with `sampling` at RNG step `rng_step`. What the offline runner and the
// tests drive a model with.
inline StepPlan OneSequencePlan(uint64_t step_id, const std::vector<int32_t>& tokens, int32_t begin,
                                int32_t count, bool sample, const SamplingParams& sampling,
                                int32_t rng_step) {
  StepPlan plan;
  plan.step_id = step_id;
  ScheduledSequence seq;
  seq.request_id = 1;
  seq.state_slot = 0;
  seq.fresh = begin == 0;
  seq.token_ids.assign(tokens.begin() + begin, tokens.begin() + begin + count);
  seq.start_position = begin;
  seq.sample = sample;
  seq.sampling = sampling;
  seq.rng_step = rng_step;
  plan.num_decodes = (!seq.fresh && count == 1) ? 1 : 0;
  plan.sequences.push_back(std::move(seq));
  return plan;
}

}  // namespace coil

#endif  // COIL_SCHEDULER_PLAN_H_
