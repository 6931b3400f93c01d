// One small interface for moving bytes between ranks after start-up: one-sided get from a
// peer's exported (registered) region into this rank's registered landing region, and
// small tagged control messages. MPI launches and bootstraps (key exchange); after that no
// collective is needed. Implementations: UCX (ucp_get_nbx, tag messages) and MPI (RMA
// windows with MPI_Rget, point-to-point messages). A registry lists what this build has.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "device/mem_kind.hpp"

namespace shardsync {


// A peer that can no longer be reached (UCX endpoint error, peer failure). Engines catch
// it to mark the peer's replica down; everything else is an Error.
class PeerFailure : public std::runtime_error {
 public:
  PeerFailure(int peer, const std::string& what) : std::runtime_error(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

// A control message: fixed header plus an optional payload.
struct CtrlMsg {
  uint32_t type = 0;
  int32_t from = -1;  // filled in by the transport on receipt (world rank)
  int32_t a = 0, b = 0, c = 0;  // message-specific small fields
  int64_t x = 0, y = 0, z = 0;  // message-specific wide fields
  std::vector<uint8_t> payload;
};

// What a rank exposes and where it lands data; registered once at start-up.
struct Registration {
  void* export_base = nullptr;  // peers read from here (a trainer's send buffer and weights; with --dedupe-node, an inference rank's landing region too); may be null
  size_t export_bytes = 0;
  void* landing_base = nullptr;  // this rank's gets land here (a consumer's receive buffer)
  size_t landing_bytes = 0;
  MemKind kind = MemKind::kHost;
};

class Transport {
 public:
  using GetId = int64_t;
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual std::string describe() const = 0;  // library version and the transports it picked
  virtual bool supports(MemKind kind) const = 0;

  // Collective over `world` (every rank, once): registers memory and exchanges keys and
  // addresses. Registration time is reported apart from transfer time.
  virtual void bootstrap(MPI_Comm world, const Registration& reg) = 0;
  // Before bootstrap: the peers this transport will read from or message (a hybrid
  // transport splits peers between two); by default all of them.
  virtual void set_peers(const std::vector<bool>& peers) { (void)peers; }

  // Capability: every peer's exported region is mapped into this process (after bootstrap,
  // mapped() gives it), so a device copy may read it directly with any strides (CUDA IPC).
  // Transports that only move bytes between registered regions answer false.
  virtual bool maps_peer_memory() const { return false; }
  virtual const uint8_t* mapped(int peer) const {
    (void)peer;
    return nullptr;
  }

  // One-sided read of `bytes` at `remote_offset` of `peer`'s exported region into this
  // rank's landing region at `local_offset`. Returns an id for test().
  virtual GetId get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) = 0;
  // True once the get has completed (its id is then released). Throws on transport errors.
  virtual bool test(GetId id) = 0;

  // Non-blocking send of a control message (the transport keeps the bytes until sent).
  virtual void send(int peer, const CtrlMsg& msg) = 0;
  // Receives one pending control message from any peer, if there is one.
  virtual bool poll(CtrlMsg* msg) = 0;
  // Drives communication; cheap when idle.
  virtual void progress() = 0;
  // Completes every outstanding send (called before the rank leaves a phase).
  virtual void flush_sends() = 0;
  // As flush_sends, but gives up on a peer with sends pending once `lost(peer)` says it is lost
  // (its heartbeats stopped: liveness is the engine's, not the transport's); returns those
  // peers (their sends are dropped). A slow peer is waited for. Transports without failure
  // handling wait for everything.
  virtual std::vector<int> flush_sends_unless(const std::function<bool(int)>& lost) {
    (void)lost;
    flush_sends();
    return {};
  }
  // A peer is gone: drop what is pending to it and never wait for it again.
  virtual void forget_peer(int peer) { (void)peer; }

  // Rejoin (a replacement process takes a dead rank's place without MPI). Transports that
  // cannot add a peer after start-up say so; UCX can.
  virtual bool supports_rejoin() const { return false; }
  // After bootstrap: how a process outside the MPI job reaches this rank (worker address,
  // exported region and its packed key), as opaque bytes.
  virtual std::vector<uint8_t> contact() const { throw_no_rejoin(); }
  // Instead of bootstrap, in a replacement process: become world rank `rank` of `size`,
  // register `reg`, and open endpoints to the peers whose contacts are non-empty.
  virtual void join(int rank, int size, const std::vector<std::vector<uint8_t>>& contacts, const Registration& reg) {
    (void)rank, (void)size, (void)contacts, (void)reg;
    throw_no_rejoin();
  }
  // In the job: `peer` is now the process behind `contact` (its old endpoint is dropped).
  virtual void accept_peer(int peer, const std::vector<uint8_t>& contact) {
    (void)peer, (void)contact;
    throw_no_rejoin();
  }
  // One message to a process known only by its contact (refusing a replacement).
  virtual void send_to_contact(const std::vector<uint8_t>& contact, const CtrlMsg& msg) {
    (void)contact, (void)msg;
    throw_no_rejoin();
  }
  // Collective over the bootstrap communicator, on the normal path only: releases
  // registrations. Destructors never call collectives (an error path must not hang).
  virtual void shutdown() = 0;

 protected:
  [[noreturn]] void throw_no_rejoin() const {
    throw std::runtime_error("transport " + name() + " cannot take a replacement process (rejoin needs --transport ucx)");
  }
};

// The registry: implementations this build has, in order of preference, with what each can
// do for a pair of ranks (capabilities; the instance's supports() has the last word where
// it depends on how a library was built, as UCX's CUDA support does).
struct TransportInfo {
  std::string name;
  std::string summary;
  std::function<std::unique_ptr<Transport>()> make;
  std::vector<MemKind> memory;     // memory kinds it can move
  bool same_node_only = false;     // reaches only ranks of its own node
  bool maps_peer_memory = false;   // reads the peer's memory directly (a mapping, no NIC)
};
const std::vector<TransportInfo>& transport_registry();
// The UCX library's version (ucp_get_version); "" in a build without UCX.
std::string ucx_version();
// --transport auto: per peer pair, within a node the first transport that maps the peer's
// memory of `memory` (CUDA IPC for GPU memory), else the first that moves it; across nodes
// the first that reaches other nodes and moves it. One name, or "LOCAL+REMOTE" where the
// two differ and the run spans nodes. Throws InputError when nothing moves `memory`.
std::string choose_transport(MemKind memory, bool one_node);
// A name "A+B" makes a hybrid: A between ranks of one node, B between nodes (peer pairs are
// classified at start-up by host name).
std::unique_ptr<Transport> make_transport(const std::string& name);
// This rank's host name; SHARDSYNC_FAKE_HOSTS=N (tests) pretends ranks come N per host.
std::string host_name(int world_rank);


}  // namespace shardsync
