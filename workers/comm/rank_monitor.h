// RankMonitor: notices, within a bounded time, a rank that can no longer take part in the
// job: killed or crashed, stopped (SIGSTOP, a frozen host), or hung inside a step. Every
// rank runs one, on a thread of its own and its own duplicate of MPI_COMM_WORLD, from
// start-up to the end. Rank 0 and each other rank send each other a heartbeat every
// period (a star: the other ranks hear only rank 0).
//
// A slow step is not a dead rank, and the two are told apart by what goes silent: the
// heartbeat comes from the monitor's thread, not from the thread running the steps, so a
// rank busy in a long prefill on a slow machine keeps beating. Silence for `rank_timeout`
// means the process is gone or stopped. A rank that still beats but has computed one step
// for `step_timeout` outside any collective (waiting for peers does not count) is hung, and
// says so itself. A rank whose work fails tells rank 0 at once (ReportFailure).
//
// A rank that dies is noticed sooner than its silence: each rank other than 0 keeps a TCP
// connection to rank 0's monitor (workers/comm/rank_link.h), which the kernel closes the
// moment either process ends. The monitor's thread polls those connections (and sleeps in
// poll between heartbeats: an idle rank does not spin); a connection that closes without
// the peer's leave byte counts as the peer's death, after a short grace in which an MPI
// message sent just before (a failure report, rank 0's EndJob) is read first for its text.
// Where no connection could be made (no common IPv4 address), only the heartbeats remain.
//
// The first failure a rank learns of is handed, once, to its callback, on the monitor's
// thread: on rank 0 it names the rank ("rank 2 stopped answering ..."); on the other ranks
// it is rank 0's silence or rank 0's EndJob. The monitor cannot end a collective under way
// (MPI has no such call): the callback ends the process, or lets rank 0 fail its requests
// and then end. Needs MPI_THREAD_MULTIPLE (the step thread uses MPI at the same time).
#ifndef COIL_WORKERS_COMM_RANK_MONITOR_H_
#define COIL_WORKERS_COMM_RANK_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/comm/mpi_session.h"
#include "workers/comm/rank_link.h"
#include "workers/comm/step_activity.h"

namespace coil::comm {

struct RankMonitorOptions {
  // Silence after which a rank counts as gone. Zero: never.
  std::chrono::milliseconds rank_timeout{10000};
  // Time one step may compute on a rank outside collectives before the rank counts as hung.
  // Zero: never.
  std::chrono::milliseconds step_timeout{600000};
  // How long a rank other than 0 tries each of rank 0's addresses for its link.
  std::chrono::milliseconds link_timeout{5000};
};

class RankMonitor {
 public:
  using FailureCallback = std::function<void(const absl::Status&)>;

  // Collective over MPI_COMM_WORLD (an MpiSession alive for the monitor's life). `activity`
  // (may be null: no step timeout) is this rank's step thread; it must outlive the monitor.
  // `on_failure` gets UNAVAILABLE with a message naming the rank.
  static absl::StatusOr<std::unique_ptr<RankMonitor>> Start(const RankMonitorOptions& options,
                                                            const StepActivity* activity,
                                                            FailureCallback on_failure);

  // Public for std::make_unique; use Start.
  RankMonitor(DuplicatedComm comm, const RankMonitorOptions& options,
              const StepActivity* activity, FailureCallback on_failure);
  ~RankMonitor();  // Leave()
  RankMonitor(const RankMonitor&) = delete;
  RankMonitor& operator=(const RankMonitor&) = delete;

  // How often heartbeats go out: an eighth of rank_timeout, within [10 ms, 1 s].
  std::chrono::milliseconds period() const { return period_; }
  // How long after a peer's link closed its death is reported (an MPI message it sent just
  // before is read first).
  static constexpr std::chrono::milliseconds kLinkGrace{200};

  // Rank 0, after a failure: tells every other rank to end now, with `why`. Waits up to
  // `timeout` for the messages to leave. Any thread.
  void EndJob(const absl::Status& why, std::chrono::milliseconds timeout);
  // A rank other than 0 whose work failed: tells rank 0 at once, waiting up to `timeout`.
  void ReportFailure(const absl::Status& status, std::chrono::milliseconds timeout);
  // The normal end (after the shutdown plan): tells the peers this rank leaves, so that its
  // silence is not a failure, and stops the thread. Not from the callback.
  void Leave();

 private:
  enum class Kind : int32_t { kBeat = 1, kLeave = 2, kEndJob = 3, kFailed = 4 };
  static constexpr size_t kTextBytes = 248;
  struct Message {
    int32_t kind = 0;
    int32_t length = 0;
    char text[kTextBytes] = {};
  };
  struct Peer {
    int rank = 0;
    Message in;
    MPI_Request recv = MPI_REQUEST_NULL;
    Message out;
    MPI_Request send = MPI_REQUEST_NULL;
    std::chrono::steady_clock::time_point last_heard;
    bool left = false;
    Fd link;  // the connection that closes when the peer's process ends (none: -1)
    bool link_closed = false;
    std::chrono::steady_clock::time_point link_closed_at;
  };

  void Run();
  // Collective, in Start: rank 0 listens and broadcasts where; the others connect.
  absl::Status OpenLinks();
  // Sleeps in poll until a link, the listener or Wake has something, or `timeout` passes.
  void WaitForEvents(std::chrono::milliseconds timeout);
  void Wake();
  // Accepts ranks' links (rank 0) and reads every open link.
  void ServiceLinks(std::chrono::steady_clock::time_point now);
  // The monitor's thread (or, before it runs and after it stopped, the owner):
  void PostReceive(Peer& peer);
  void Receive(Peer& peer, std::chrono::steady_clock::time_point now);
  // Sends `message` to `peer` if its previous send has completed; false when still busy.
  bool TrySend(Peer& peer, Kind kind, const std::string& text);
  void CheckPeers(std::chrono::steady_clock::time_point now);
  void CheckOwnStep(std::chrono::steady_clock::time_point now);
  void Report(const absl::Status& status);
  // Sends `kind` with `text` to every peer still there, waiting up to `timeout` for the
  // sends to complete (called on the monitor's thread, or by the owner once it stopped).
  void SendToAll(Kind kind, const std::string& text, std::chrono::milliseconds timeout);
  // Runs `kind` to every peer on the monitor's thread and waits for it, or sends inline.
  void SendUrgent(Kind kind, const std::string& text, std::chrono::milliseconds timeout);

  DuplicatedComm comm_;
  const RankMonitorOptions options_;
  const std::chrono::milliseconds period_;
  const StepActivity* const activity_;
  FailureCallback on_failure_;
  std::vector<Peer> peers_;
  Fd listener_;                      // rank 0, until every peer has linked
  std::vector<PendingLink> pending_;  // rank 0: accepted, hello not yet read
  uint64_t token_ = 0;
  Fd wake_read_, wake_write_;  // a pipe: wakes the monitor's thread from poll
  bool reported_ = false;          // the monitor's thread only
  bool own_step_reported_ = false;  // the monitor's thread only
  std::chrono::steady_clock::time_point next_beat_;

  std::mutex mu_;  // guards what follows
  bool stop_ = false;
  bool urgent_pending_ = false;
  Kind urgent_kind_ = Kind::kBeat;
  std::string urgent_text_;
  std::chrono::milliseconds urgent_timeout_{0};
  std::condition_variable urgent_done_;
  std::thread thread_;
  std::thread::id thread_id_;  // the monitor's thread, set when it starts
  bool left_ = false;
};

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_RANK_MONITOR_H_
