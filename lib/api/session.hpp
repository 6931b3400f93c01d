// The library's C++ API: a Session is one process's part in a weight-sync job whose trainer
// ranks hold real tensors and whose inference ranks hold real engine parameters (the C ABI in
// include/shardsync.h and the Python package wrap it).
//
// Inside an MPI job (mpirun, or mpi4py's COMM_WORLD handed in): ranks 0..T-1 of the
// communicator train, the rest serve inference, as in the CLI. Every rank constructs its
// Session with the same options (collective), binds its tensors by name, and then each step:
//   trainer ranks:   publish(version)   (after the optimizer step has written the tensors)
//   inference ranks: pull(version)      (the same version; fills the bound parameters)
// A publish returns once every live receiver has read what it needs: only then may the
// optimizer write those tensors again. A pull returns with the parameters complete; the
// caller must not run inference on them meanwhile.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/stats.hpp"
#include "engine/weights.hpp"

namespace shardsync {

struct SessionOptions {
  std::string model;        // a bundled model name (shardsync model list) or a config.json path
  std::string trainer;      // trainer layout: "tp2", "tp2,pp2", "tp1,ep2", "fsdp4"
  std::string inference;    // one replica's layout: "tp2", "dp2,ep2"
  int replicas = 1;         // inference replicas
  std::string engine = "v3";
  std::string transport = "auto";
  std::string memory = "host";  // where the tensors live: host | cuda
  int gpu = -1;                 // memory cuda: this rank's device (-1: 0)
  double failure_timeout_s = 10;
  double stall_timeout_s = 120;
  int64_t send_buffer_bytes = 64 << 20, recv_buffer_bytes = 16 << 20, chunk_bytes = 4 << 20;
  // Checksums of every piece (engine/checksum.hpp): the trainer hashes it where it lies, the
  // receiver where it landed; a pull whose sums differ raises, naming the tensor and elements.
  // Not with the broadcast engine.
  bool checksum = false;
  int test_corrupt_at_sync = -1;  // test hook: inference rank 0 flips one landed bit at this sync (0-based)
};

// One tensor this rank binds: a trainer's HF shard, an inference rank's engine parameter.
struct TensorInfo {
  std::string name;
  std::string dtype;  // "bf16", "f16", "f32"
  std::vector<int64_t> shape;
  void* slot = nullptr;  // its place in the registered region (bind it there: zero copy)
  int64_t bytes = 0;
};

class Session {
 public:
  // Collective over `comm`: resolves the model and layouts, records the plans, registers
  // memory, starts heartbeats. Throws Error (InputError for bad options) on every rank alike:
  // the rank that failed with its message, the others naming it.
  Session(MPI_Comm comm, const SessionOptions& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  bool is_trainer() const;
  int rank() const;        // in the communicator
  int replica() const;     // inference ranks; -1 on trainers
  int local_rank() const;  // inference ranks: rank within the replica; -1 on trainers
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // The caller's memory for tensor `name`: checked against the tensor's dtype, shape and the
  // session's memory kind (InputError naming the tensor, the expected and the given). Each
  // tensor is bound once; a tensor bound at its slot is moved in place.
  void bind(const std::string& name, void* data, const std::string& dtype, const std::vector<int64_t>& shape,
            const std::string& memory);

  // Trainer ranks: every live receiver reads `version` of the bound tensors (collective with
  // the receivers' pull of the same version). Versions only go up.
  void publish(uint64_t version);
  // Inference ranks: the bound parameters are filled with `version`.
  void pull(uint64_t version);

  // Inference ranks: the version the parameters hold (0: none yet), and whether they are
  // partial (a sync that did not complete: never reported as a whole version).
  uint64_t held_version() const { return held_version_; }
  bool partial() const { return partial_; }
  // This rank's last sync.
  const RankStats& last() const { return last_; }

  // Collective end of the run (every rank); releases registrations. After a loss the run
  // cannot survive (the calls in flight threw Error naming it), only this process's part. The
  // destructor of an open session ends only this process's part (no collective).
  void close();

 private:
  void sync(uint64_t version, bool trainer_side);
  struct State;
  std::unique_ptr<State> s_;
  std::vector<TensorInfo> tensors_;
  std::vector<bool> bound_;
  uint64_t last_version_ = 0, held_version_ = 0;
  bool partial_ = false;
  int sync_index_ = 0;
  RankStats last_;
};

}  // namespace shardsync
