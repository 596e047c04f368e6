// RequestStream: one delivery per completed write, everything that piled up meanwhile
// folded into it in push order, nothing after the end or after Detach. Expected values are
// the pushed pieces concatenated by hand.
#include "engine/request_stream.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace coil {
namespace {

// Records deliveries the way the reactor receives them.
class Recorder : public RequestStream::Listener {
 public:
  void Deliver(StreamBatch batch) override { batches.push_back(std::move(batch)); }
  std::vector<StreamBatch> batches;
};

StreamBatch Piece(const std::string& text, int32_t id) {
  StreamBatch batch;
  batch.text = text;
  batch.token_ids.push_back(id);
  return batch;
}

TEST(RequestStreamTest, PushesBeforeAttachArriveAsOneBatch) {
  RequestStream stream(7, "client-7");
  stream.Push(Piece("he", 1));
  stream.Push(Piece("llo", 2));
  Recorder recorder;
  stream.Attach(&recorder);
  ASSERT_EQ(recorder.batches.size(), 1u);
  EXPECT_EQ(recorder.batches[0].text, "hello");
  EXPECT_EQ(recorder.batches[0].token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(recorder.batches[0].ends());
}

TEST(RequestStreamTest, OneWriteInFlightFoldsWhatPilesUp) {
  RequestStream stream(1, "c");
  Recorder recorder;
  stream.Attach(&recorder);
  stream.Push(Piece("a", 10));  // delivered at once: nothing in flight
  stream.Push(Piece("b", 11));  // waits for WriteDone
  stream.Push(Piece("c", 12));
  ASSERT_EQ(recorder.batches.size(), 1u);
  StreamBatch last;
  last.final = StreamFinal{};
  last.final->reason = StreamFinish::kLength;
  stream.Push(std::move(last));
  EXPECT_TRUE(stream.ended());
  stream.WriteDone();
  ASSERT_EQ(recorder.batches.size(), 2u);
  EXPECT_EQ(recorder.batches[1].text, "bc");
  EXPECT_EQ(recorder.batches[1].token_ids, (std::vector<int32_t>{11, 12}));
  ASSERT_TRUE(recorder.batches[1].final.has_value());
  EXPECT_EQ(recorder.batches[1].final->reason, StreamFinish::kLength);
  stream.WriteDone();  // nothing left
  EXPECT_EQ(recorder.batches.size(), 2u);
}

TEST(RequestStreamTest, NothingAfterTheEnd) {
  RequestStream stream(1, "c");
  Recorder recorder;
  stream.Attach(&recorder);
  StreamBatch cancelled;
  cancelled.error = absl::CancelledError("gone");
  stream.Push(std::move(cancelled));
  stream.Push(Piece("late", 3));  // the engine had not seen the cancel yet
  stream.WriteDone();
  ASSERT_EQ(recorder.batches.size(), 1u);
  EXPECT_EQ(recorder.batches[0].error.code(), absl::StatusCode::kCancelled);
}

TEST(RequestStreamTest, DetachStopsDelivery) {
  RequestStream stream(1, "c");
  Recorder recorder;
  stream.Attach(&recorder);
  stream.Push(Piece("a", 1));
  stream.Detach();
  stream.Push(Piece("b", 2));
  stream.WriteDone();
  EXPECT_EQ(recorder.batches.size(), 1u);
}

// A producer thread and a consumer acknowledging writes concurrently: every token arrives
// exactly once and in order (the invariant the reactor relies on).
TEST(RequestStreamTest, ConcurrentProducerAndConsumerKeepOrder) {
  constexpr int kTokens = 5000;
  RequestStream stream(1, "c");
  struct Acker : RequestStream::Listener {
    void Deliver(StreamBatch batch) override {
      ids.insert(ids.end(), batch.token_ids.begin(), batch.token_ids.end());
      ended = ended || batch.ends();
      pending_ack = true;
    }
    std::vector<int32_t> ids;
    bool ended = false;
    bool pending_ack = false;
  } acker;
  stream.Attach(&acker);
  std::thread producer([&] {
    for (int i = 0; i < kTokens; ++i) stream.Push(Piece("x", i));
    StreamBatch last;
    last.final = StreamFinal{};
    stream.Push(std::move(last));
  });
  // The consumer acknowledges under the same discipline as gRPC: one WriteDone per
  // delivery. pending_ack is written under the stream's lock; read it through WriteDone's
  // own locking by always calling WriteDone (a spurious one is harmless: nothing in flight).
  while (!stream.ended()) stream.WriteDone();
  producer.join();
  stream.WriteDone();
  stream.WriteDone();
  ASSERT_EQ(acker.ids.size(), static_cast<size_t>(kTokens));
  for (int i = 0; i < kTokens; ++i) ASSERT_EQ(acker.ids[i], i);
  EXPECT_TRUE(acker.ended);
}

// The end observer runs once, with the outcome of the push that ended the stream, however
// many threads race to end it (the engine finishing a request while its client cancels):
// the request counters rely on this to count every request exactly once.
TEST(RequestStreamTest, EndIsObservedOnceByTheWinningPush) {
  for (int round = 0; round < 200; ++round) {
    RequestStream stream(1, "c");
    std::atomic<int> calls{0};
    StreamOutcome seen;
    stream.ObserveEnd([&](const StreamOutcome& outcome) {
      seen = outcome;
      calls.fetch_add(1);
    });
    Recorder recorder;
    stream.Attach(&recorder);
    std::atomic<int> winners{0};
    absl::StatusCode winning_code = absl::StatusCode::kOk;
    std::thread finisher([&] {
      StreamBatch last;
      last.final = StreamFinal{};
      last.final->reason = StreamFinish::kEos;
      if (stream.Push(std::move(last))) winners.fetch_add(1);
    });
    StreamBatch cancelled;
    cancelled.error = absl::CancelledError("gone");
    if (stream.Push(std::move(cancelled))) {
      winners.fetch_add(1);
      winning_code = absl::StatusCode::kCancelled;
    }
    finisher.join();
    ASSERT_EQ(winners.load(), 1);
    ASSERT_EQ(calls.load(), 1);
    EXPECT_EQ(seen.code, winning_code);
    if (winning_code == absl::StatusCode::kOk) {
      EXPECT_EQ(seen.reason, StreamFinish::kEos);
    }
    EXPECT_FALSE(stream.Push(Piece("late", 1)));
    EXPECT_EQ(calls.load(), 1);
  }
}

}  // namespace
}  // namespace coil
