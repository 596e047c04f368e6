#include "engine/request_stream.h"

#include <utility>

namespace coil {

void StreamBatch::Fold(StreamBatch next) {
  text += next.text;
  token_ids.insert(token_ids.end(), next.token_ids.begin(), next.token_ids.end());
  for (StreamLogprob& logprob : next.logprobs) logprobs.push_back(std::move(logprob));
  if (next.final.has_value()) final = std::move(next.final);
  if (!next.error.ok()) error = std::move(next.error);
}

void RequestStream::ObserveEnd(EndObserver observer) {
  std::lock_guard<std::mutex> lock(mu_);
  end_observer_ = std::move(observer);
}

bool RequestStream::Push(StreamBatch batch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return false;
  ended_ = batch.ends();
  if (ended_ && end_observer_) {
    // Before the end is delivered: a client that has seen its call end sees it counted.
    StreamOutcome outcome;
    outcome.code = batch.error.code();
    if (batch.error.ok() && batch.final.has_value()) outcome.reason = batch.final->reason;
    end_observer_(outcome);
    end_observer_ = nullptr;
  }
  pending_.push_back(std::move(batch));
  MaybeDeliverLocked();
  return ended_;
}

void RequestStream::MarkAdmitted() {
  std::lock_guard<std::mutex> lock(mu_);
  admitted_ = true;
  if (listener_ != nullptr) listener_->Admitted();
}

void RequestStream::Attach(Listener* listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = listener;
  if (admitted_) listener_->Admitted();
  MaybeDeliverLocked();
}

void RequestStream::WriteDone() {
  std::lock_guard<std::mutex> lock(mu_);
  write_in_flight_ = false;
  MaybeDeliverLocked();
}

void RequestStream::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = nullptr;
  pending_.clear();
}

bool RequestStream::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void RequestStream::MaybeDeliverLocked() {
  if (listener_ == nullptr || write_in_flight_ || pending_.empty()) return;
  StreamBatch batch = std::move(pending_.front());
  pending_.pop_front();
  while (!pending_.empty()) {
    batch.Fold(std::move(pending_.front()));
    pending_.pop_front();
  }
  write_in_flight_ = true;
  listener_->Deliver(std::move(batch));
}

}  // namespace coil
