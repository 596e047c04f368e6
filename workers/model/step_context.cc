#include "workers/model/step_context.h"

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil::model {
namespace {

std::string LayerContext(int64_t layer) {
  if (layer == kInputLayer) return "embedding";
  if (layer == kOutputLayer) return "lm_head";
  return absl::StrCat("layer ", layer);
}

}  // namespace

bool RankCollectives::ReadsBackendMemory() const {
  return comm_.size() == 1 || backend_.device() == Device::kCpu ||
         comm_.memory_space() == comm::MemorySpace::kDevice;
}

absl::Status RankCollectives::AllReduce(float* data, size_t count, absl::Status* local) {
  if (comm_.size() == 1) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  absl::Status reduced;
  if (ReadsBackendMemory()) {
    reduced = comm_.AllReduceSum(data, count);
  } else {
    host_stage_.resize(count);
    absl::Status copied = backend_.CopyToHost(host_stage_.data(), data, count * 4);
    reduced = comm_.AllReduceSum(host_stage_.data(), count);
    if (copied.ok() && reduced.ok()) {
      copied = backend_.CopyFromHost(data, host_stage_.data(), count * 4);
    }
    if (local->ok() && !copied.ok()) *local = copied;
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return reduced;
}

void StepContext::Fail(const absl::Status& status) {
  // The context string is built only when an op fails: Run is called for every op of every
  // layer of every step.
  if (!local_.ok() || status.ok()) return;
  local_ = layer_ == kNoLayer ? status : Annotate(status, LayerContext(layer_));
}

void StepContext::AllReduce(float* data, size_t count) {
  if (!collectives_ || !collective_.ok()) return;
  absl::Status staged;
  collective_ = ranks_.AllReduce(data, count, &staged);
  if (!staged.ok()) Fail(staged);
}

}  // namespace coil::model
