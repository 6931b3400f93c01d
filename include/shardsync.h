/* shardsync C ABI: real weights in, real weights out.
 *
 * One process's part in a weight-sync job inside an MPI job: ranks 0..T-1 of the
 * communicator hold trainer shards, the rest hold inference engine parameters (vLLM's
 * names and shapes). Every rank opens a session with the same options, binds each of its
 * tensors by name, then per step trainers publish a version and inference ranks pull it.
 *
 * Every call returns SHARDSYNC_OK or an error status; shardsync_last_error() then says
 * what went wrong on this thread (the tensor, the expected and the given, for bad input).
 * The library never exits the process on a bad call.
 *
 *   shardsync_session* s;
 *   if (shardsync_open(MPI_Comm_c2f(MPI_COMM_WORLD),
 *                      "{\"model\": \"tiny-qwen3\", \"trainer\": \"tp1\", \"inference\": \"tp2\"}", &s))
 *     fprintf(stderr, "%s\n", shardsync_last_error());
 *   ... shardsync_bind(s, "model.layers.0.mlp.down_proj.weight", ptr, "bf16", 2, shape, "host");
 *   ... shardsync_publish(s, 1);   (trainer ranks)   shardsync_pull(s, 1);   (inference ranks)
 *   shardsync_close(s);
 */
#ifndef SHARDSYNC_H_
#define SHARDSYNC_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARDSYNC_ABI_VERSION 1

enum {
  SHARDSYNC_OK = 0,
  SHARDSYNC_ERROR = 1,       /* a failure (see shardsync_last_error) */
  SHARDSYNC_BAD_INPUT = 2,   /* a bad option, tensor, shape, dtype, device or version */
};

typedef struct shardsync_session shardsync_session;

/* The ABI version this library implements (SHARDSYNC_ABI_VERSION of its header). */
int shardsync_abi_version(void);
/* What the last failed call on this thread said ("" if none). */
const char* shardsync_last_error(void);

/* Collective over the communicator (a Fortran handle: MPI_Comm_c2f, or mpi4py's
 * comm.py2f()). options_json: {"model": NAME|PATH, "trainer": "tp2", "inference": "tp2",
 * "replicas": 1, "engine": "v3", "transport": "auto", "memory": "host"|"cuda", "gpu": 0,
 * "failure_timeout_s": 10, "stall_timeout_s": 120, "send_buffer_bytes": ..., "recv_buffer_bytes":
 * ..., "chunk_bytes": ..., "checksum": false}. */
int shardsync_open(int64_t mpi_comm_f, const char* options_json, shardsync_session** out);

/* This rank: trainer (1) or inference (0), its rank, replica and rank in the replica (-1 on
 * trainers). */
int shardsync_role(const shardsync_session* s, int* trainer, int* rank, int* replica, int* local_rank);
/* The tensors this rank binds: a trainer's HF shards, an inference rank's engine parameters.
 * Pointers stay valid until shardsync_close. slot: the tensor's place in the registered
 * region (bound there it moves in place, zero copy, whatever the transport; a tensor bound
 * elsewhere moves in place where the transport maps the caller's memory: docs/library.md). */
int shardsync_num_tensors(const shardsync_session* s, int* count);
int shardsync_tensor(const shardsync_session* s, int index, const char** name, const char** dtype, int* ndim,
                     const int64_t** shape, void** slot, int64_t* bytes);

/* The caller's memory for tensor `name` ("bf16", "f16" or "f32"; memory "host" or "cuda"). */
int shardsync_bind(shardsync_session* s, const char* name, void* data, const char* dtype, int ndim, const int64_t* shape,
                   const char* memory);

/* Trainer ranks: every live receiver reads `version` (returns when they all have: the
 * tensors may then be written again). The caller's writes must be complete (on CUDA: its
 * stream synchronized; the Python package does it). Inference ranks: fill the bound
 * parameters with `version` (complete, device synchronized, when it returns). Collective
 * between the two sides; versions only go up. */
int shardsync_publish(shardsync_session* s, uint64_t version);
int shardsync_pull(shardsync_session* s, uint64_t version);

/* Inference ranks: the version the parameters hold (0: none) and whether they are partial. */
int shardsync_held_version(const shardsync_session* s, uint64_t* version, int* partial);
/* This rank's last sync: seconds, bytes received (inference) or served (trainer), bytes staged
 * (copied in or out because a bound tensor lies outside its slot). */
int shardsync_last_sync(const shardsync_session* s, double* seconds, int64_t* bytes, int64_t* staged_bytes);

/* With "checksum": true, this rank's last sync: pieces hashed (trainer: where they lie; inference:
 * where they landed, and compared), pieces whose sums differed (inference; a pull with any fails),
 * and the seconds spent hashing (part of the sync's time). */
int shardsync_last_checksum(const shardsync_session* s, int64_t* pieces, int64_t* differ, double* hash_seconds);

/* Collective end of the run; frees the session. */
int shardsync_close(shardsync_session* s);
/* Frees the session without the collective end (an error path: this process leaves the job,
 * and its peers see it lost, as if it had died). */
int shardsync_free(shardsync_session* s);

#ifdef __cplusplus
}
#endif

#endif /* SHARDSYNC_H_ */
