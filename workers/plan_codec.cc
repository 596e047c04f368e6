#include "workers/plan_codec.h"

#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coil/v1/step.pb.h"

namespace coil {

std::string EncodeStepPlan(const StepPlan& plan) {
  v1::StepPlanProto proto;
  proto.set_step_id(plan.step_id);
  proto.set_shutdown(plan.shutdown);
  proto.set_num_decodes(plan.num_decodes);
  for (const ScheduledSequence& s : plan.sequences) {
    v1::StepSequence* out = proto.add_sequences();
    out->set_request_id(s.request_id);
    out->set_state_slot(s.state_slot);
    out->set_fresh(s.fresh);
    out->mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
    out->set_start_position(s.start_position);
    out->mutable_kv_block_table()->Add(s.kv_block_table.begin(), s.kv_block_table.end());
    out->set_sample(s.sample);
    out->set_rng_step(s.rng_step);
    out->mutable_history()->Add(s.history.begin(), s.history.end());
    out->set_num_prompt_tokens(s.num_prompt_tokens);
    if (s.sample) {
      v1::StepSamplingParams* p = out->mutable_sampling();
      p->set_temperature(s.sampling.temperature);
      p->set_top_k(s.sampling.top_k);
      p->set_top_p(s.sampling.top_p);
      p->set_min_p(s.sampling.min_p);
      p->set_presence_penalty(s.sampling.presence_penalty);
      p->set_frequency_penalty(s.sampling.frequency_penalty);
      p->set_repetition_penalty(s.sampling.repetition_penalty);
      p->set_seed(s.sampling.seed);
      p->set_logprobs(s.sampling.logprobs);
      p->set_top_logprobs(s.sampling.top_logprobs);
    }
  }
  for (const auto& [copies, out] : {std::pair{&plan.restores, proto.mutable_restores()},
                                    std::pair{&plan.snapshots, proto.mutable_snapshots()}}) {
    for (const StateCopy& copy : *copies) {
      v1::StepStateCopy* added = out->Add();
      added->set_from_slot(copy.from_slot);
      added->set_to_slot(copy.to_slot);
    }
  }
  return proto.SerializeAsString();
}

absl::StatusOr<StepPlan> DecodeStepPlan(const std::string& bytes) {
  v1::StepPlanProto proto;
  if (!proto.ParseFromString(bytes)) {
    return absl::InternalError(
        absl::StrCat("step plan of ", bytes.size(), " bytes does not parse as StepPlanProto"));
  }
  StepPlan plan;
  plan.step_id = proto.step_id();
  plan.shutdown = proto.shutdown();
  plan.num_decodes = proto.num_decodes();
  if (plan.num_decodes < 0 || plan.num_decodes > proto.sequences_size()) {
    return absl::InternalError(absl::StrCat("step ", plan.step_id, ": num_decodes ",
                                            plan.num_decodes, " outside [0, ",
                                            proto.sequences_size(), "]"));
  }
  plan.sequences.reserve(static_cast<size_t>(proto.sequences_size()));
  for (int i = 0; i < proto.sequences_size(); ++i) {
    const v1::StepSequence& in = proto.sequences(i);
    ScheduledSequence s;
    s.request_id = in.request_id();
    s.state_slot = in.state_slot();
    s.fresh = in.fresh();
    s.token_ids.assign(in.token_ids().begin(), in.token_ids().end());
    s.start_position = in.start_position();
    s.kv_block_table.assign(in.kv_block_table().begin(), in.kv_block_table().end());
    s.sample = in.sample();
    s.rng_step = in.rng_step();
    s.history.assign(in.history().begin(), in.history().end());
    s.num_prompt_tokens = in.num_prompt_tokens();
    if (s.token_ids.empty()) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": sequence ", i,
                                              " (request ", s.request_id, ") has no tokens"));
    }
    if (s.start_position < 0 || (s.fresh && s.start_position != 0)) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": sequence ", i,
                                              " has start_position ", s.start_position,
                                              (s.fresh ? " but is fresh" : "")));
    }
    if (i < plan.num_decodes && (s.token_ids.size() != 1 || s.fresh)) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": decode ", i,
                                              " must have one token and not be fresh"));
    }
    if (s.sample) {
      const v1::StepSamplingParams& p = in.sampling();
      s.sampling.temperature = p.temperature();
      s.sampling.top_k = p.top_k();
      s.sampling.top_p = p.top_p();
      s.sampling.min_p = p.min_p();
      s.sampling.presence_penalty = p.presence_penalty();
      s.sampling.frequency_penalty = p.frequency_penalty();
      s.sampling.repetition_penalty = p.repetition_penalty();
      s.sampling.seed = p.seed();
      s.sampling.logprobs = p.logprobs();
      s.sampling.top_logprobs = p.top_logprobs();
    }
    plan.sequences.push_back(std::move(s));
  }
  for (const auto& [in, copies, what] :
       {std::tuple{&proto.restores(), &plan.restores, "restore"},
        std::tuple{&proto.snapshots(), &plan.snapshots, "snapshot"}}) {
    for (const v1::StepStateCopy& copy : *in) {
      if (copy.from_slot() < 0 || copy.to_slot() < 0 || copy.from_slot() == copy.to_slot()) {
        return absl::InternalError(absl::StrCat("step ", plan.step_id, ": ", what,
                                                " copies state row ", copy.from_slot(), " to ",
                                                copy.to_slot()));
      }
      copies->push_back({copy.from_slot(), copy.to_slot()});
    }
  }
  return plan;
}

}  // namespace coil
