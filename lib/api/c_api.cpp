// The C ABI (include/shardsync.h) over Session: every call catches, keeps the message for
// shardsync_last_error() on this thread, and returns a status; nothing exits the process.
#include "shardsync.h"

#include <nlohmann/json.hpp>

#include "api/session.hpp"
#include "common/error.hpp"

using shardsync::InputError;
using shardsync::Session;
using shardsync::SessionOptions;

struct shardsync_session {
  std::unique_ptr<Session> session;
};

namespace {

thread_local std::string last_error;

template <class F>
int guarded(F&& f) {
  try {
    f();
    last_error.clear();
    return SHARDSYNC_OK;
  } catch (const InputError& e) {
    last_error = e.what();
    return SHARDSYNC_BAD_INPUT;
  } catch (const std::exception& e) {
    last_error = e.what();
    return SHARDSYNC_ERROR;
  }
}

void need(const void* p, const char* what) {
  if (!p) throw InputError(what, "(null)", "a valid pointer");
}

SessionOptions parse_options(const char* text) {
  need(text, "options_json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InputError("options_json", "(text)", std::string("a JSON object: ") + e.what());
  }
  if (!j.is_object()) throw InputError("options_json", "(text)", "a JSON object");
  SessionOptions o;
  for (auto& [key, v] : j.items()) {
    auto str = [&](std::string* out) {
      if (!v.is_string()) throw InputError("options_json", key, "a string");
      *out = v.get<std::string>();
    };
    auto num = [&](auto* out) {
      if (!v.is_number()) throw InputError("options_json", key, "a number");
      *out = v.get<std::remove_pointer_t<decltype(out)>>();
    };
    if (key == "model") str(&o.model);
    else if (key == "trainer") str(&o.trainer);
    else if (key == "inference") str(&o.inference);
    else if (key == "engine") str(&o.engine);
    else if (key == "transport") str(&o.transport);
    else if (key == "memory") str(&o.memory);
    else if (key == "replicas") num(&o.replicas);
    else if (key == "gpu") num(&o.gpu);
    else if (key == "failure_timeout_s") num(&o.failure_timeout_s);
    else if (key == "stall_timeout_s") num(&o.stall_timeout_s);
    else if (key == "send_buffer_bytes") num(&o.send_buffer_bytes);
    else if (key == "recv_buffer_bytes") num(&o.recv_buffer_bytes);
    else if (key == "chunk_bytes") num(&o.chunk_bytes);
    else if (key == "test_corrupt_at_sync") num(&o.test_corrupt_at_sync);
    else if (key == "checksum") {
      if (!v.is_boolean()) throw InputError("options_json", key, "true or false");
      o.checksum = v.get<bool>();
    } else
      throw InputError("options_json", key,
                       "one of model, trainer, inference, replicas, engine, transport, memory, gpu, failure_timeout_s, "
                       "stall_timeout_s, send_buffer_bytes, recv_buffer_bytes, chunk_bytes, checksum");
  }
  return o;
}

}  // namespace

extern "C" {

int shardsync_abi_version(void) { return SHARDSYNC_ABI_VERSION; }

const char* shardsync_last_error(void) { return last_error.c_str(); }

int shardsync_open(int64_t mpi_comm_f, const char* options_json, shardsync_session** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    SessionOptions o = parse_options(options_json);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) throw InputError("mpi_comm_f", "(MPI)", "MPI initialized by the caller (mpi4py, or MPI_Init)");
    MPI_Comm comm = MPI_Comm_f2c(MPI_Fint(mpi_comm_f));
    auto s = std::make_unique<shardsync_session>();
    s->session = std::make_unique<Session>(comm, o);
    *out = s.release();
  });
}

int shardsync_role(const shardsync_session* s, int* trainer, int* rank, int* replica, int* local_rank) {
  return guarded([&] {
    need(s, "session");
    if (trainer) *trainer = s->session->is_trainer() ? 1 : 0;
    if (rank) *rank = s->session->rank();
    if (replica) *replica = s->session->replica();
    if (local_rank) *local_rank = s->session->local_rank();
  });
}

int shardsync_num_tensors(const shardsync_session* s, int* count) {
  return guarded([&] {
    need(s, "session");
    need(count, "count");
    *count = int(s->session->tensors().size());
  });
}

int shardsync_tensor(const shardsync_session* s, int index, const char** name, const char** dtype, int* ndim,
                     const int64_t** shape, void** slot, int64_t* bytes) {
  return guarded([&] {
    need(s, "session");
    const auto& all = s->session->tensors();
    if (index < 0 || size_t(index) >= all.size())
      throw InputError("index", std::to_string(index), "0.." + std::to_string(int(all.size()) - 1));
    const auto& t = all[size_t(index)];
    if (name) *name = t.name.c_str();
    if (dtype) *dtype = t.dtype.c_str();
    if (ndim) *ndim = int(t.shape.size());
    if (shape) *shape = t.shape.data();
    if (slot) *slot = t.slot;
    if (bytes) *bytes = t.bytes;
  });
}

int shardsync_bind(shardsync_session* s, const char* name, void* data, const char* dtype, int ndim, const int64_t* shape,
                   const char* memory) {
  return guarded([&] {
    need(s, "session");
    need(name, "name");
    need(dtype, "dtype");
    need(memory, "memory");
    if (ndim < 0 || (ndim > 0 && !shape)) throw InputError(name, "shape", "ndim >= 0 sizes");
    s->session->bind(name, data, dtype, std::vector<int64_t>(shape, shape + ndim), memory);
  });
}

int shardsync_publish(shardsync_session* s, uint64_t version) {
  return guarded([&] {
    need(s, "session");
    s->session->publish(version);
  });
}

int shardsync_pull(shardsync_session* s, uint64_t version) {
  return guarded([&] {
    need(s, "session");
    s->session->pull(version);
  });
}

int shardsync_held_version(const shardsync_session* s, uint64_t* version, int* partial) {
  return guarded([&] {
    need(s, "session");
    if (version) *version = s->session->held_version();
    if (partial) *partial = s->session->partial() ? 1 : 0;
  });
}

int shardsync_last_sync(const shardsync_session* s, double* seconds, int64_t* bytes, int64_t* staged_bytes) {
  return guarded([&] {
    need(s, "session");
    const auto& st = s->session->last();
    if (seconds) *seconds = st.total_s;
    if (bytes) *bytes = st.trainer ? st.bytes_out : st.bytes_in;
    if (staged_bytes) *staged_bytes = st.staged_bytes;
  });
}

int shardsync_last_checksum(const shardsync_session* s, int64_t* pieces, int64_t* differ, double* hash_seconds) {
  return guarded([&] {
    need(s, "session");
    const auto& st = s->session->last();
    if (pieces) *pieces = st.checksum_pieces;
    if (differ) *differ = st.checksum_bad;
    if (hash_seconds) *hash_seconds = st.hash_s;
  });
}

int shardsync_close(shardsync_session* s) {
  return guarded([&] {
    if (!s) return;
    std::unique_ptr<shardsync_session> owned(s);
    owned->session->close();
  });
}

int shardsync_free(shardsync_session* s) {
  return guarded([&] { delete s; });
}

}  // extern "C"
