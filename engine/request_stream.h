// RequestStream: the queue between the engine loop (the producer: one thread) and one
// Generate call (the consumer: gRPC's reactor). The engine pushes events and never waits;
// the reactor keeps at most one write in flight and, when it finishes, takes everything
// that piled up meanwhile as one batch. Invariant: the listener is reached only under the
// stream's mutex, and Detach (the call is over) clears it under that mutex, so the engine
// never touches a call that gRPC has already destroyed. A stream ends exactly once (the
// first ending event wins, whoever pushes it), which is where a front end that wants it
// (the HTTP API, through the end observer) counts its outcome. Free of gRPC types on
// purpose.
#ifndef COIL_ENGINE_REQUEST_STREAM_H_
#define COIL_ENGINE_REQUEST_STREAM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/plan.h"

namespace coil {

// How a generation finished without an error. A request the server cuts short (drain
// timeout, a failed rank) or the client abandons ends with an error status instead.
enum class StreamFinish { kNone, kLength, kStop, kEos };

// The final facts of a generation, carried by the last event.
struct StreamFinal {
  StreamFinish reason = StreamFinish::kNone;
  std::string matched_stop;  // the stop string, or the stop token's text
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // prompt tokens resumed from the prefix cache
  double queue_seconds = 0.0;
  double time_to_first_token_seconds = 0.0;
  double total_seconds = 0.0;
};

// One token's logprob and its alternatives, when asked for.
struct StreamLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// What the engine pushes, and what the reactor receives folded: new text, the tokens it
// came from, and at the end either `final` (success) or a non-OK `error`.
struct StreamBatch {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<StreamLogprob> logprobs;
  std::optional<StreamFinal> final;
  absl::Status error;

  bool ends() const { return final.has_value() || !error.ok(); }
  // Appends `next` (text and tokens concatenate; the end, if any, is taken from `next`).
  void Fold(StreamBatch next);
};

// How a stream ended: `reason` when it finished (code OK), otherwise the error's code.
struct StreamOutcome {
  StreamFinish reason = StreamFinish::kNone;
  absl::StatusCode code = absl::StatusCode::kOk;
};

class RequestStream {
 public:
  // Told how the stream ended, once, by the thread whose push ended it, under the
  // stream's lock and before the end is delivered (so a client that has seen its call end
  // sees it counted). Must not block or touch the stream.
  using EndObserver = std::function<void(const StreamOutcome&)>;

  // The consumer side. Deliver runs under the stream's mutex and must not block (it
  // starts a write or finishes the call); the stream then waits for WriteDone before it
  // delivers again.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void Deliver(StreamBatch batch) = 0;
    // The engine took the request into its scheduler (it was not refused). Runs under the
    // stream's mutex, at most once, and must not block.
    virtual void Admitted() {}
  };

  RequestStream(uint64_t request_id, std::string client_request_id)
      : request_id_(request_id), client_request_id_(std::move(client_request_id)) {}

  uint64_t request_id() const { return request_id_; }
  const std::string& client_request_id() const { return client_request_id_; }

  // Set before the first push that may end the stream (the engine does it on Submit).
  void ObserveEnd(EndObserver observer);

  // Any thread (the engine loop, the call's reactor on cancellation, a failure path).
  // Events after the one that ends the stream are dropped; returns true when this push
  // ended it.
  bool Push(StreamBatch batch);
  // Engine thread: the scheduler accepted the request (a refusal is pushed as an error).
  void MarkAdmitted();
  // Consumer: connects the listener and delivers what is pending.
  void Attach(Listener* listener);
  // Consumer: the previous delivery's write completed; delivers what piled up.
  void WriteDone();
  // Consumer: the call is over (OnDone); nothing is delivered after this returns.
  void Detach();

  // True once the ending event has been pushed.
  bool ended() const;

 private:
  // Hands pending events to the listener when one is attached and idle.
  void MaybeDeliverLocked();

  const uint64_t request_id_;
  const std::string client_request_id_;
  mutable std::mutex mu_;
  std::deque<StreamBatch> pending_;
  Listener* listener_ = nullptr;
  bool write_in_flight_ = false;
  bool ended_ = false;
  bool admitted_ = false;
  EndObserver end_observer_;
};

}  // namespace coil

#endif  // COIL_ENGINE_REQUEST_STREAM_H_
