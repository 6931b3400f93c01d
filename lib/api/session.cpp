// Session: the library's C++ API over the engines (session.hpp).
#include "api/session.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "engine/checksum.hpp"
#include "engine/engine.hpp"
#include "layout/parse.hpp"
#include "model/catalog.hpp"
#include "plan/plan.hpp"

namespace shardsync {

struct Session::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<ModelSpec> model;
  std::unique_ptr<TrainerPlacement> trainer;
  std::unique_ptr<InferencePlacement> inference;
  std::vector<RankPlan> plans;
  World world;
  std::unique_ptr<Engines> engines;
  EngineKind engine = EngineKind::kV3;
  MemKind memory = MemKind::kHost;
  bool closed = false;
};

namespace {

// Every rank of `comm` learns whether any failed, and throws alike: the first rank that
// failed with its own message, the others naming it and its message.
void agree_or_throw(MPI_Comm comm, const std::string& error) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int mine = error.empty() ? size : rank, first = size;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return;
  int n = rank == first ? int(error.size()) : 0;
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, first, comm));
  std::string text = rank == first ? error : std::string(size_t(n), '\0');
  MPI_CHECK(MPI_Bcast(text.data(), n, MPI_CHAR, first, comm));
  throw Error(rank == first ? text : "rank " + std::to_string(first) + " failed: " + text);
}

bool one_node(MPI_Comm comm) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local = 0, size = 0, all = 0;
  MPI_CHECK(MPI_Comm_size(node, &local));
  MPI_CHECK(MPI_Comm_free(&node));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_CHECK(MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MIN, comm));
  return all == size;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Session::Session(MPI_Comm comm, const SessionOptions& o) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.comm = comm;
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const bool single_node = one_node(comm);
  SyncOptions eo;
  std::string error;
  try {
    if (o.model.empty()) throw InputError("model", "(missing)", "a bundled model name or a config.json path");
    s.model = std::make_unique<ModelSpec>(load_model(o.model));
    TrainerLayout tl = parse_trainer_spec(o.trainer, "trainer");
    InferenceLayout il = parse_inference_spec(o.inference, "inference");
    if (o.replicas < 1) throw InputError("replicas", std::to_string(o.replicas), "1 or more inference replicas");
    il.replicas = o.replicas;
    s.trainer = std::make_unique<TrainerPlacement>(*s.model, tl);
    s.inference = std::make_unique<InferencePlacement>(*s.model, il);
    const int need = s.trainer->world_size() + s.inference->world_size();
    if (size != need)
      throw InputError("communicator", "size " + std::to_string(size),
                       std::to_string(need) + " ranks: trainer " + tl.describe() + " = " +
                           std::to_string(s.trainer->world_size()) + ", inference " + il.describe() + " = " +
                           std::to_string(s.inference->world_size()));
    const EngineSpec* e = find_engine(o.engine);
    if (!e) throw InputError("engine", o.engine, "one of " + engine_list());
    s.engine = e->kind;
    if (o.memory != "host" && o.memory != "cuda") throw InputError("memory", o.memory, "host or cuda");
    s.memory = o.memory == "cuda" ? MemKind::kCuda : MemKind::kHost;
    eo.memory = s.memory;
    eo.gpu = s.memory == MemKind::kCuda ? std::max(0, o.gpu) : -1;
    eo.transport = o.transport == "auto" ? choose_transport(s.memory, single_node) : o.transport;
    auto probe = make_transport(eo.transport);  // validates the name
    eo.weights = WeightsFrom::kCaller;
    eo.syncs_back_to_back = false;
    eo.failure_timeout_s = o.failure_timeout_s;
    eo.stall_timeout_s = o.stall_timeout_s;
    eo.tolerate_failures = probe->supports_rejoin() && launcher_survives_death();
    eo.send_buffer_bytes = o.send_buffer_bytes;
    eo.recv_buffer_bytes = o.recv_buffer_bytes;
    eo.chunk_bytes = o.chunk_bytes;
    eo.checksum = o.checksum;
    eo.corrupt_at_sync = o.test_corrupt_at_sync;
    if (o.checksum && e->delivery != Delivery::kPull)
      throw InputError("checksum", "true", "a pull engine (v1-v4): the broadcast moves whole buckets, not pieces, given " + o.engine);
    eo.check_sizes();
    if (o.failure_timeout_s < 0.01) throw InputError("failure_timeout_s", std::to_string(o.failure_timeout_s), "0.01 s or more");
    s.plans = record_plans(*s.model, *s.inference);
  } catch (const std::exception& x) {
    error = x.what();
  }
  agree_or_throw(comm, error);
  s.world = World::create(comm, *s.trainer, *s.inference);
  allow_idle_sleep_where_oversubscribed(comm);
  try {
    s.engines = std::make_unique<Engines>(s.world, *s.model, *s.trainer, *s.inference, s.plans, eo);
    error.clear();
  } catch (const std::exception& x) {
    error = x.what();  // refusals before any collective (every rank alike)
  }
  agree_or_throw(comm, error);
  s.engines->bootstrap();
  for (const TensorSlot& t : s.engines->slots())
    tensors_.push_back(TensorInfo{t.name, dtype_name(t.dtype), t.shape, t.slot, t.bytes});
  bound_.assign(tensors_.size(), false);
}

Session::~Session() = default;

bool Session::is_trainer() const { return s_->world.trainer; }
int Session::rank() const { return s_->world.rank; }
int Session::replica() const { return s_->world.replica; }
int Session::local_rank() const { return s_->world.local_rank; }

void Session::bind(const std::string& name, void* data, const std::string& dtype, const std::vector<int64_t>& shape,
                   const std::string& memory) {
  if (s_->closed) throw Error("bind " + name + ": the session is closed");
  auto it = std::find_if(tensors_.begin(), tensors_.end(), [&](const TensorInfo& t) { return t.name == name; });
  const std::string side = is_trainer() ? "trainer rank " : "inference rank ";
  if (it == tensors_.end())
    throw InputError(name, "(name)", std::string("a tensor of ") + side + std::to_string(rank()) +
                                         (is_trainer() ? " (an HF tensor this rank holds a shard of" : " (an engine parameter of its plan") +
                                         "; Session.tensors() lists them)");
  const size_t i = size_t(it - tensors_.begin());
  if (bound_[i]) throw InputError(name, "(bound)", "each tensor bound once; this one is bound already");
  if (dtype != it->dtype) throw InputError(name, "dtype", it->dtype + ", given " + dtype);
  if (shape != it->shape)
    throw InputError(name, "shape",
                     shape_text(it->shape) + (is_trainer() ? " (this rank's shard)" : " (this rank's engine parameter)") +
                         ", given " + shape_text(shape));
  const std::string want = s_->memory == MemKind::kCuda ? "cuda" : "host";
  if (memory != want) throw InputError(name, "device", want + " memory (the session's), given " + memory);
  if (!data && it->bytes > 0) throw InputError(name, "data", "a tensor's memory, given a null pointer");
  s_->engines->bind(i, static_cast<uint8_t*>(data));
  bound_[i] = true;
}

void Session::publish(uint64_t version) { sync(version, true); }
void Session::pull(uint64_t version) { sync(version, false); }

void Session::sync(uint64_t version, bool trainer_side) {
  const char* call = trainer_side ? "publish" : "pull";
  if (s_->closed) throw Error(std::string(call) + ": the session is closed");
  if (trainer_side != is_trainer())
    throw Error(std::string(call) + ": rank " + std::to_string(rank()) + " is " +
                (is_trainer() ? "a trainer rank (trainers publish)" : "an inference rank (inference ranks pull)"));
  if (version <= last_version_)
    throw InputError(std::string(call) + "(version)", std::to_string(version),
                     "greater than the last version, " + std::to_string(last_version_) + " (versions only go up)");
  size_t unbound = 0;
  std::string first;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (!bound_[i] && tensors_[i].bytes > 0 && unbound++ == 0) first = tensors_[i].name;
  if (unbound > 0)
    throw InputError(first, "(not bound)",
                     "every tensor bound before the first " + std::string(call) + ": " + std::to_string(unbound) + " of " +
                         std::to_string(tensors_.size()) + " are not (bind one at its slot to keep it there)");
  if (!trainer_side) partial_ = true;  // until this pull completes
  RankStats st = s_->engines->sync(s_->engine, sync_index_++, version);
  s_->engines->collect(st);
  s_->engines->disarm();  // the caller's step until the next sync is not a stall
  last_ = st;
  last_version_ = version;
  if (trainer_side) return;
  if (st.stood_down || st.skipped)
    throw Error("pull of version " + std::to_string(version) + ": this rank's replica is down (a rank of it was lost); "
                "the parameters are partial (last whole version " + std::to_string(held_version_) + ")");
  if (st.checksum_bad > 0)  // the parameters hold what landed, which is not what the trainers hashed
    throw Error("pull of version " + std::to_string(version) + ": rank " + std::to_string(rank()) + ": " +
                describe_bad_sums(st, *s_->model, s_->plans.at(size_t(s_->inference->coord(rank() - s_->world.num_trainers).local))) +
                "; the parameters are partial (last whole version " + std::to_string(held_version_) + ")");
  held_version_ = version;
  partial_ = false;
}

void Session::close() {
  if (s_->closed) return;
  s_->closed = true;
  if (s_->engines->broken()) return;  // a rank was lost: no collective end (it would wait for it)
  if (!s_->engines->finish()) s_->engines->shutdown();  // a degraded run leaves without collectives
}

}  // namespace shardsync
