#include "workers/comm/rank_monitor.h"

#include <fcntl.h>
#include <mpi.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil::comm {
namespace {

using Clock = std::chrono::steady_clock;

// One tag for everything on the monitor's own communicator.
constexpr int kTag = 1;

double Seconds(Clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

std::chrono::milliseconds PeriodFor(std::chrono::milliseconds rank_timeout) {
  if (rank_timeout.count() <= 0) return std::chrono::milliseconds(1000);
  return std::clamp(rank_timeout / 8, std::chrono::milliseconds(10),
                    std::chrono::milliseconds(1000));
}

// Waits until `request` completes or `deadline` passes; true when it completed.
bool WaitUntil(MPI_Request& request, Clock::time_point deadline) {
  while (request != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankMonitor>> RankMonitor::Start(const RankMonitorOptions& options,
                                                                const StepActivity* activity,
                                                                FailureCallback on_failure) {
  int level = MPI_THREAD_SINGLE;
  COIL_RETURN_IF_ERROR(MpiStatus(MPI_Query_thread(&level), "MPI_Query_thread"));
  if (level < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(
        "the rank monitor needs MPI_THREAD_MULTIPLE (it uses MPI beside the step thread); use "
        "an MPI built with thread support, or turn the monitor off (--rank-timeout 0)");
  }
  if (options.rank_timeout.count() < 0 || options.step_timeout.count() < 0) {
    return absl::InvalidArgumentError("the rank and step timeouts must be zero (off) or positive");
  }
  COIL_ASSIGN_OR_RETURN(DuplicatedComm comm, DuplicatedComm::OfWorld());
  auto monitor = std::make_unique<RankMonitor>(std::move(comm), options, activity,
                                               std::move(on_failure));
  int pipe_fds[2] = {-1, -1};
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return absl::InternalError("the rank monitor could not make its wake-up pipe");
  }
  monitor->wake_read_ = Fd(pipe_fds[0]);
  monitor->wake_write_ = Fd(pipe_fds[1]);
  COIL_RETURN_IF_ERROR(monitor->OpenLinks());
  for (Peer& peer : monitor->peers_) monitor->PostReceive(peer);
  RankMonitor* raw = monitor.get();
  monitor->thread_ = std::thread([raw] { raw->Run(); });
  return monitor;
}

RankMonitor::RankMonitor(DuplicatedComm comm, const RankMonitorOptions& options,
                         const StepActivity* activity, FailureCallback on_failure)
    : comm_(std::move(comm)),
      options_(options),
      period_(PeriodFor(options.rank_timeout)),
      activity_(activity),
      on_failure_(std::move(on_failure)) {
  const Clock::time_point now = Clock::now();
  const int rank = comm_.rank();
  const int size = comm_.size();
  for (int r = 0; r < size; ++r) {
    if (r == rank || (rank != 0 && r != 0)) continue;
    Peer peer;
    peer.rank = r;
    peer.last_heard = now;
    peers_.push_back(std::move(peer));
  }
  next_beat_ = now;
}

absl::Status RankMonitor::OpenLinks() {
  LinkAddress address;
  if (comm_.rank() == 0) {
    absl::StatusOr<Fd> listener = ListenForLinks(address);
    if (listener.ok()) {
      listener_ = std::move(listener).value();
      token_ = address.token;
    } else {
      address = LinkAddress();  // port 0: nobody connects
      COIL_LOG(WARNING) << "the rank monitor cannot listen for the other ranks' links ("
                        << listener.status().message()
                        << "): a dead rank is noticed only by its silence (--rank-timeout)";
    }
  }
  COIL_RETURN_IF_ERROR(MpiStatus(
      MPI_Bcast(&address, sizeof(address), MPI_BYTE, 0, comm_.get()), "MPI_Bcast (link address)"));
  if (comm_.rank() == 0 || address.port == 0) return absl::OkStatus();
  absl::StatusOr<Fd> link = ConnectLink(address, comm_.rank(), options_.link_timeout);
  if (link.ok()) {
    peers_.front().link = std::move(link).value();
  } else {
    COIL_LOG(WARNING) << "no link to rank 0's monitor (" << link.status().message()
                      << "): rank 0's death is noticed only by its silence (--rank-timeout)";
  }
  return absl::OkStatus();
}

void RankMonitor::Wake() {
  const char byte = 1;
  if (wake_write_.valid()) (void)write(wake_write_.get(), &byte, 1);
}

void RankMonitor::WaitForEvents(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  fds.push_back({wake_read_.get(), POLLIN, 0});
  if (listener_.valid()) fds.push_back({listener_.get(), POLLIN, 0});
  for (const PendingLink& pending : pending_) fds.push_back({pending.fd.get(), POLLIN, 0});
  for (const Peer& peer : peers_) {
    if (peer.link.valid()) fds.push_back({peer.link.get(), POLLIN, 0});
  }
  if (poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) > 0 &&
      (fds[0].revents & POLLIN) != 0) {
    char drain[64];
    while (read(wake_read_.get(), drain, sizeof(drain)) > 0) {
    }
  }
}

void RankMonitor::ServiceLinks(Clock::time_point now) {
  if (listener_.valid()) {
    for (;;) {
      const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      PendingLink pending;
      pending.fd = Fd(fd);
      pending.accepted = now;
      pending_.push_back(std::move(pending));
    }
  }
  for (size_t i = 0; i < pending_.size();) {
    absl::StatusOr<int> rank = ReadHello(pending_[i], token_);
    bool done = !rank.ok() || *rank >= 0 || now - pending_[i].accepted > std::chrono::seconds(30);
    if (rank.ok() && *rank > 0) {
      auto peer = std::find_if(peers_.begin(), peers_.end(),
                               [&](const Peer& p) { return p.rank == *rank; });
      if (peer != peers_.end() && !peer->link.valid() && !peer->link_closed) {
        peer->link = std::move(pending_[i].fd);
      }
    }
    if (done) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  bool all_linked = true;
  for (Peer& peer : peers_) {
    all_linked = all_linked && (peer.link.valid() || peer.link_closed);
    if (!peer.link.valid()) continue;
    if (!ReadLink(peer.link, peer.left)) {
      peer.link.Close();
      peer.link_closed = true;
      peer.link_closed_at = now;
    }
  }
  if (all_linked && pending_.empty()) listener_.Close();
}

RankMonitor::~RankMonitor() { Leave(); }

void RankMonitor::PostReceive(Peer& peer) {
  MPI_Irecv(&peer.in, sizeof(Message), MPI_BYTE, peer.rank, kTag, comm_.get(), &peer.recv);
}

bool RankMonitor::TrySend(Peer& peer, Kind kind, const std::string& text) {
  if (peer.send != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Test(&peer.send, &done, MPI_STATUS_IGNORE);
    if (!done) return false;
  }
  peer.out = Message();
  peer.out.kind = static_cast<int32_t>(kind);
  const size_t length = std::min(text.size(), kTextBytes);
  std::memcpy(peer.out.text, text.data(), length);
  peer.out.length = static_cast<int32_t>(length);
  MPI_Isend(&peer.out, sizeof(Message), MPI_BYTE, peer.rank, kTag, comm_.get(), &peer.send);
  return true;
}

void RankMonitor::Receive(Peer& peer, Clock::time_point now) {
  while (peer.recv != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(&peer.recv, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) return;
    peer.last_heard = now;
    const Message message = peer.in;
    PostReceive(peer);
    const std::string text(message.text, std::clamp<int32_t>(message.length, 0, kTextBytes));
    switch (static_cast<Kind>(message.kind)) {
      case Kind::kBeat:
        break;
      case Kind::kLeave:
        peer.left = true;
        break;
      case Kind::kEndJob:
        Report(absl::UnavailableError(absl::StrCat("rank 0 ended the job: ", text)));
        break;
      case Kind::kFailed:
        Report(absl::UnavailableError(absl::StrCat("rank ", peer.rank, " failed: ", text)));
        break;
    }
  }
}

void RankMonitor::CheckPeers(Clock::time_point now) {
  for (const Peer& peer : peers_) {
    if (peer.left || !peer.link_closed || now - peer.link_closed_at < kLinkGrace) continue;
    Report(absl::UnavailableError(absl::StrFormat(
        "rank %d died: its process ended (killed, crashed or exited) without leaving the job "
        "(its connection to the rank monitor closed)",
        peer.rank)));
    return;
  }
  if (options_.rank_timeout.count() <= 0) return;
  for (const Peer& peer : peers_) {
    if (peer.left || now - peer.last_heard <= options_.rank_timeout) continue;
    Report(absl::UnavailableError(absl::StrFormat(
        "rank %d stopped answering: nothing from it for %.1f s (--rank-timeout %.1f s); it "
        "died, was stopped, or its host cannot be reached",
        peer.rank, Seconds(now - peer.last_heard), Seconds(options_.rank_timeout))));
    return;
  }
}

void RankMonitor::CheckOwnStep(Clock::time_point now) {
  if (activity_ == nullptr || options_.step_timeout.count() <= 0 || own_step_reported_) return;
  const StepActivity::Snapshot snapshot = activity_->Read();
  if (snapshot.state != StepActivity::State::kComputing ||
      now - snapshot.since <= options_.step_timeout) {
    return;
  }
  own_step_reported_ = true;
  const std::string what = absl::StrFormat(
      "step %d has run for %.1f s on rank %d outside any collective (--step-timeout %.1f s); "
      "the rank is hung",
      snapshot.step_id, Seconds(now - snapshot.since), comm_.rank(), Seconds(options_.step_timeout));
  if (comm_.rank() == 0) {
    Report(absl::UnavailableError(what));
  } else {
    // Rank 0 names this rank to its clients and then ends the job.
    TrySend(peers_.front(), Kind::kFailed, what);
  }
}

void RankMonitor::Report(const absl::Status& status) {
  if (reported_) return;
  reported_ = true;
  COIL_LOG(ERROR) << status.message();
  if (on_failure_) on_failure_(status);
}

void RankMonitor::Run() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    thread_id_ = std::this_thread::get_id();
  }
  for (;;) {
    bool urgent = false;
    Kind urgent_kind = Kind::kBeat;
    std::string urgent_text;
    std::chrono::milliseconds urgent_timeout{0};
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = !stop_ && !urgent_pending_;
    }
    // Wake() after this check writes to the pipe, so poll returns at once.
    if (idle) {
      WaitForEvents(std::clamp(period_ / 2, std::chrono::milliseconds(5),
                               std::chrono::milliseconds(100)));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      if (urgent_pending_) {
        urgent = true;
        urgent_kind = urgent_kind_;
        urgent_text = urgent_text_;
        urgent_timeout = urgent_timeout_;
      }
    }
    if (urgent) {
      SendToAll(urgent_kind, urgent_text, urgent_timeout);
      {
        std::lock_guard<std::mutex> lock(mu_);
        urgent_pending_ = false;
      }
      urgent_done_.notify_all();
    }
    // Everything that arrived first, so that a rank that was itself not scheduled for a
    // while counts what its peers sent meanwhile before it judges their silence.
    Clock::time_point now = Clock::now();
    ServiceLinks(now);
    for (Peer& peer : peers_) Receive(peer, now);
    now = Clock::now();
    if (now >= next_beat_) {
      for (Peer& peer : peers_) {
        if (!peer.left) TrySend(peer, Kind::kBeat, "");
      }
      next_beat_ = now + period_;
    }
    CheckPeers(now);
    CheckOwnStep(now);
  }
}

void RankMonitor::SendToAll(Kind kind, const std::string& text,
                            std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (Peer& peer : peers_) {
    if (peer.left) continue;
    // A beat still on its way first (it is small: it leaves at once unless the peer is gone).
    if (!WaitUntil(peer.send, deadline)) continue;
    TrySend(peer, kind, text);
  }
  for (Peer& peer : peers_) WaitUntil(peer.send, deadline);
}

void RankMonitor::SendUrgent(Kind kind, const std::string& text,
                             std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (left_) return;
  if (std::this_thread::get_id() == thread_id_) {
    lock.unlock();
    SendToAll(kind, text, timeout);
    return;
  }
  // Wait for any earlier urgent message, then hand this one to the monitor's thread.
  urgent_done_.wait(lock, [&] { return !urgent_pending_; });
  urgent_pending_ = true;
  urgent_kind_ = kind;
  urgent_text_ = text;
  urgent_timeout_ = timeout;
  Wake();
  urgent_done_.wait_for(lock, timeout + std::chrono::milliseconds(100),
                        [&] { return !urgent_pending_; });
}

void RankMonitor::EndJob(const absl::Status& why, std::chrono::milliseconds timeout) {
  if (comm_.rank() != 0) return;
  SendUrgent(Kind::kEndJob, std::string(why.message()), timeout);
}

void RankMonitor::ReportFailure(const absl::Status& status, std::chrono::milliseconds timeout) {
  if (comm_.rank() == 0) return;
  SendUrgent(Kind::kFailed, std::string(status.message()), timeout);
}

void RankMonitor::Leave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (left_) return;
    left_ = true;
    stop_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  // The thread is gone: MPI on these requests, and the links, are this thread's now. The
  // leave byte goes first, so that the link's end is not taken for a death.
  for (Peer& peer : peers_) WriteLeave(peer.link);
  SendToAll(Kind::kLeave, "", std::chrono::milliseconds(1000));
  for (Peer& peer : peers_) {
    if (peer.recv != MPI_REQUEST_NULL) {
      MPI_Cancel(&peer.recv);
      MPI_Wait(&peer.recv, MPI_STATUS_IGNORE);
    }
    // A send that has not completed (its peer is gone) is released, not waited for.
    if (peer.send != MPI_REQUEST_NULL) MPI_Request_free(&peer.send);
  }
}

}  // namespace coil::comm
