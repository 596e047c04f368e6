// Serializes a StepPlan to the bytes rank 0 broadcasts (proto/coil/v1/step.proto) and back.
// Decoding validates what a well-formed plan must satisfy before any rank acts on it: a
// malformed plan is refused with INTERNAL naming the field, never executed.
#ifndef COIL_WORKERS_PLAN_CODEC_H_
#define COIL_WORKERS_PLAN_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "scheduler/plan.h"

namespace coil {

std::string EncodeStepPlan(const StepPlan& plan);
absl::StatusOr<StepPlan> DecodeStepPlan(const std::string& bytes);

}  // namespace coil

#endif  // COIL_WORKERS_PLAN_CODEC_H_
