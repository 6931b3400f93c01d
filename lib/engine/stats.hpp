// What one rank did in one sync, and rejoin events: plain records shared by the engines,
// the result writers and readers (no MPI).
#pragma once

#include <cstdint>

namespace shardsync {

// What one rank did in one sync. Times are busy seconds in each phase (phases overlap in
// V3, so they need not sum to the total).
struct RankStats {
  int32_t rank = 0;
  int32_t trainer = 0;
  double total_s = 0;      // START (consumer) or trainer barrier, to weights live / units released
  double gather_s = 0;
  double pack_s = 0;
  double transfer_s = 0;   // consumer: wall time with a read in flight (overlaps once); broadcast: time in MPI_Bcast
  double wait_s = 0;       // idle waiting for data or buffer space
  double process_s = 0;    // unpack into the layerwise buffer + process + copy into live weights
  double quantize_s = 0;   // FP8 target: inference ranks, the process step's quantization (in place: launch to completion); trainers with FP8 on the wire, the pack's quantize launches (the work itself on a CPU)
  double verify_s = 0;
  int64_t bytes_in = 0;    // bytes this rank received (gets or broadcast)
  int64_t one_pass_bytes = 0;  // consumer: of bytes_in, read from trainers' weights in one pass
  int64_t bytes_out = 0;   // bytes peers pulled from this rank
  int64_t messages = 0;    // control messages sent
  int64_t gets = 0;
  int64_t chunks_packed = 0;       // trainer: chunks packed into the send buffer
  int64_t pack_launches = 0;       // trainer: copy launches they took (a round of chunks is one)
  int64_t pack_copies = 0;         // trainer: copy jobs in them (pieces of chunks)
  int64_t pack_copies_together = 0;  // of those, run row by row together (CPU; 0 on GPUs)
  int64_t peak_staging_bytes = 0;  // gathered slabs + send/recv/bucket + layerwise buffers
  int64_t mismatches = 0;
  int32_t bad_param = -1;          // engine parameter of the first mismatch
  int64_t bad_index = -1;          // its element index
  int32_t reported = 1;            // 0: no report (dead or stood down)
  int32_t stood_down = 0;          // consumer: its replica was taken down before this sync
  int32_t peers_lost = 0;          // trainer: consumers it declared dead in this sync
  int32_t replica = -1;            // consumer's replica
  int32_t skipped = 0;             // the sync did not run (a broadcast after a rank failed)
  // Delta sync (--delta). Consumer: chunk bytes the records it pulled stand for (what a sync
  // without --delta moves), of bytes_in the records' headers and change bitmaps, and chunks
  // that came whole (anchors); trainer: time comparing packed chunks with the last sent and
  // writing the records (change detection). Both: memory holding the kept chunks.
  int64_t delta_full_bytes = 0;
  int64_t delta_index_bytes = 0;
  int64_t delta_whole_chunks = 0;
  int64_t delta_chunks = 0;
  double delta_detect_s = 0;
  int64_t delta_kept_bytes = 0;
  // Consumer: the plan's bytes it pulled from the trainers (packed and one pass, the payload of
  // bytes_in), and with --dedupe-node the bytes it copied from a rank of its node instead, and
  // those it could not (its puller died; not verified). host: its node (the lowest world rank
  // on that host), -1 when unknown.
  int64_t network_bytes = 0;
  int64_t node_bytes = 0;
  int64_t node_lost_bytes = 0;
  int32_t host = -1;
  // The caller's weights (WeightsFrom::kCaller): bytes copied into the registered region
  // (trainer) or out of it (consumer) because the caller's tensor lies outside its slot.
  int64_t staged_bytes = 0;
  // --checksum (engine/checksum.hpp). Trainer: pieces it hashed where they lie, and the time
  // (apart from the sync's phases); consumer: pieces it hashed where they landed and compared,
  // the time, the pieces whose sums differed, and the first of them: its HF tensor, its engine
  // parameter and the parameter's elements [lo, hi] it covers, and the trainer that sent it.
  double hash_s = 0;
  int64_t checksum_pieces = 0;
  int64_t checksum_bad = 0;
  int32_t bad_sum_hf = -1, bad_sum_param = -1, bad_sum_from = -1;
  int64_t bad_sum_lo = -1, bad_sum_hi = -1;
};

// A replacement process took a dead rank's place (rank 0's record).
struct RejoinEvent {
  int rank = -1, replica = -1;
  uint64_t version = 0;  // the first weights version it received
  bool replica_up = false;  // its replica came back up with it
};

}  // namespace shardsync
