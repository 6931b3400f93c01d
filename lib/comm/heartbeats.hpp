// Liveness from heartbeats: a rank is alive while its heartbeats arrive. Each process sends a
// small UDP datagram to every peer it knows, every interval, from a thread of its own that no
// compute step (copy, quantize, verify) and no MPI call blocks; the same thread receives its
// peers' beats. A peer is lost when its beats stop for the failure timeout, or at once when its
// port answers closed (the kernel's ICMP port-unreachable: the process is gone). A peer that
// says it leaves (the end of the run) is never lost; one that ends because it lost a peer says
// so too, and the peer it names is lost for every process that hears it (each survivor then
// names the first loss, not the ranks that ended after it).
//
// Why a socket, not MPI or the data transport: MPI is initialised FUNNELED (no second thread
// may call it) and a rank blocked in a collective cannot answer anything; UCX workers are
// single-threaded here and CUDA IPC has no messages; a socket needs neither, works the same
// for a replacement process outside the MPI job, and for launches without mpirun.
// No MPI here: the engine exchanges contacts (bootstrap, rendezvous) and decides what a loss means.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardsync {

// How a peer was lost.
struct PeerLoss {
  enum class Kind : uint8_t { kSilent, kGone } kind = Kind::kSilent;
  double silent_s = 0;  // since its last heartbeat (or since it became known)
  int seen_by = -1;     // >= 0: told by that rank, which ended on it
  int ended_on = -1;    // >= 0: this peer ended itself, having lost that rank
  // "no heartbeat for 2.1 s" / "its process is gone (heartbeat port closed; last heartbeat 0.2 s ago)"
  std::string describe() const;
};

class Heartbeats {
 public:
  using OnLoss = std::function<void(int peer, const PeerLoss&)>;
  // Opens this process's socket (any port) for world rank `rank` of `size`; `token` tells this
  // job's beats from any other's. Throws Error when no socket can be had.
  Heartbeats(int rank, int size, uint64_t token);
  ~Heartbeats();
  Heartbeats(const Heartbeats&) = delete;
  Heartbeats& operator=(const Heartbeats&) = delete;

  // How another process reaches this one: the job token, an IPv4 address and port, and the
  // host name (a peer on the same host uses the loopback address). The address is the first
  // non-loopback interface that is up, or SHARDSYNC_HEARTBEAT_IF's (an interface name).
  std::vector<uint8_t> contact() const;
  // The token inside a contact (a replacement learns its job's token from a trainer's).
  static uint64_t token_of(const std::vector<uint8_t>& contact);
  // Peer `peer` is the process behind `contact`: a new incarnation, heard from as of now.
  void set_peer(int peer, const std::vector<uint8_t>& contact);

  // Starts the thread: a beat to every known peer every interval (a tenth of the timeout, at
  // most 0.5 s), and on_loss (on that thread) once per peer incarnation when it is lost.
  void start(double timeout_s, OnLoss on_loss);
  // The end of the run: tells every peer this process leaves (so that none calls it lost), and
  // stops the thread. Idempotent.
  void leave();
  // This process ends because it lost `peer` (`why`): tells every peer, from any thread (the
  // heartbeat thread included), without stopping it.
  void announce_loss(int peer, const PeerLoss& why);

  // From any thread: whether `peer` is lost (its beats silent past the timeout, or its process
  // gone), and how. A peer never known, or that left, is not lost.
  bool lost(int peer, PeerLoss* why = nullptr) const;
  // Seconds since `peer`'s last beat (since it became known if none came); -1 if unknown.
  double silent_s(int peer) const;
  double interval_s() const { return interval_s_; }

 private:
  struct Peer {
    bool known = false, gone = false, left = false, reported = false;
    uint32_t addr = 0;  // network order
    uint16_t port = 0;  // network order
    double last_heard = 0;
    int told_by = -1;   // a peer that ended on this one's loss
    PeerLoss told;      // what it saw
    int ended_on = -1;  // this peer ended on losing that rank
  };
  void run();
  void send_all(uint32_t kind, int32_t about = -1, uint32_t loss = 0);
  void receive(double now);
  void read_errors();
  bool lost_locked(const Peer& p, double now, PeerLoss* why) const;

  const int rank_;
  const uint64_t token_;
  int fd_ = -1;
  uint32_t my_addr_ = 0;
  uint16_t my_port_ = 0;
  std::string host_;
  double timeout_s_ = 10, interval_s_ = 0.5;
  OnLoss on_loss_;
  mutable std::mutex mu_;
  std::vector<Peer> peers_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shardsync
