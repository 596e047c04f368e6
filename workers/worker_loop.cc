#include "workers/worker_loop.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "workers/comm/step_status.h"
#include "workers/plan_codec.h"

namespace coil {
namespace {

// The first byte of a broadcast message says what follows.
constexpr char kSamplePlan = 'S';
constexpr char kLogitsPlan = 'L';

// The kind byte, then the encoded plan.
std::string Message(char kind, const std::string& bytes) {
  std::string message;
  message.reserve(bytes.size() + 1);
  message.push_back(kind);
  message.append(bytes);
  return message;
}

// Marks a step on `activity` for its scope (null: nothing).
class ScopedStep {
 public:
  ScopedStep(comm::StepActivity* activity, uint64_t step_id) : activity_(activity) {
    if (activity_ != nullptr) activity_->BeginStep(step_id);
  }
  ~ScopedStep() {
    if (activity_ != nullptr) activity_->EndStep();
  }
  ScopedStep(const ScopedStep&) = delete;
  ScopedStep& operator=(const ScopedStep&) = delete;

 private:
  comm::StepActivity* activity_;
};

}  // namespace

StepResult ExecuteDecodedPlan(ModelRunner& runner, comm::Communicator& comm,
                              const absl::StatusOr<StepPlan>& plan) {
  if (plan.ok()) return runner.Execute(*plan);
  // Take part in the status exchange so the other ranks learn of the failure.
  StepResult result;
  result.ok = false;
  auto failures = comm::AllReduceStepStatus(comm, plan.status());
  const absl::Status combined =
      failures.ok() ? comm::CombineRankFailures(*failures) : failures.status();
  result.failed_rank = failures.ok() && !failures->empty() ? failures->front().rank : comm.rank();
  result.fatal = !failures.ok();
  result.error = std::string(combined.message());
  return result;
}

StepResult StepDriver::Run(const StepPlan& plan) {
  last_step_id_ = plan.step_id;
  const std::string bytes = EncodeStepPlan(plan);
  if (channel_ != nullptr) {
    const absl::Status sent = channel_->Send(Message(kSamplePlan, bytes));
    if (!sent.ok()) {
      StepResult result;
      result.step_id = plan.step_id;
      result.ok = false;
      result.fatal = true;
      result.failed_rank = 0;
      result.error = absl::StrCat("broadcasting step ", plan.step_id, ": ", sent.message());
      return result;
    }
  }
  ScopedStep step(activity_, plan.step_id);
  return ExecuteDecodedPlan(runner_, comm_, DecodeStepPlan(bytes));
}

absl::StatusOr<std::vector<float>> StepDriver::RunAllLogits(const StepPlan& plan) {
  const std::string bytes = EncodeStepPlan(plan);
  if (channel_ != nullptr) COIL_RETURN_IF_ERROR(channel_->Send(Message(kLogitsPlan, bytes)));
  COIL_ASSIGN_OR_RETURN(StepPlan decoded, DecodeStepPlan(bytes));
  ScopedStep step(activity_, plan.step_id);
  return runner_.ExecuteAllLogits(decoded);
}

absl::Status StepDriver::Shutdown() {
  if (channel_ == nullptr) return absl::OkStatus();
  StepPlan plan;
  plan.step_id = last_step_id_ + 1;
  plan.shutdown = true;
  return channel_->Send(Message(kSamplePlan, EncodeStepPlan(plan)));
}

absl::Status RunWorkerLoop(ModelRunner& runner, comm::Communicator& comm,
                           comm::BroadcastChannel& channel, comm::StepActivity* activity) {
  while (true) {
    COIL_ASSIGN_OR_RETURN(std::string message, channel.Receive());
    if (message.empty()) {
      return absl::InternalError("received an empty step message from rank 0");
    }
    const std::string bytes = message.substr(1);
    if (message[0] == kLogitsPlan) {
      auto plan = DecodeStepPlan(bytes);
      COIL_RETURN_IF_ERROR(plan.status());
      ScopedStep step(activity, plan->step_id);
      COIL_RETURN_IF_ERROR(runner.ExecuteAllLogits(*plan).status());
      continue;
    }
    const absl::StatusOr<StepPlan> plan = DecodeStepPlan(bytes);
    if (plan.ok() && plan->shutdown) return absl::OkStatus();
    ScopedStep step(activity, plan.ok() ? plan->step_id : 0);
    const StepResult result = ExecuteDecodedPlan(runner, comm, plan);
    if (!result.ok) {
      COIL_LOG(WARNING) << "step " << result.step_id << " failed: " << result.error;
    }
  }
}

}  // namespace coil
