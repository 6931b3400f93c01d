#include "engine/gather.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "common/error.hpp"

namespace shardsync {

namespace {

bool is_expert_kind(TensorKind k) {
  return k == TensorKind::kExpertGate || k == TensorKind::kExpertUp || k == TensorKind::kExpertDown ||
         k == TensorKind::kFusedExpertsGateUp || k == TensorKind::kFusedExpertsDown;
}

// Copies a packed box into a slab (elements [lo, ...) of the tensor, dim-0 aligned).
void place_box(const ParamMeta& p, int64_t slab_lo, const Box& box, const uint8_t* packed, uint8_t* slab) {
  int64_t eb = dtype_bytes(p.dtype);
  std::vector<int64_t> shape = p.shape;
  int64_t row = p.numel() / shape[0];
  Box b = box;
  b.start[0] -= slab_lo / row;
  shape[0] = std::max<int64_t>(b.start[0] + b.length[0], 1);
  for_each_box_run(shape, b, [&](int64_t global, int64_t local, int64_t n) {
    std::memcpy(slab + global * eb, packed + local * eb, size_t(n * eb));
  });
}

}  // namespace

UnitGather::UnitGather(const GatherContext& ctx, const Unit& unit, SourcePolicy policy) : ctx_(ctx) {
  rank_ = ctx.world->rank;
  for (int32_t hf : unit.tensors) plan_tensor(hf, policy);
  // Post one collective per communicator for the whole unit.
  for (auto& gp : comms_) {
    CommGather& g = *gp;
    int n = int(g.by_member.size()), me = 0;
    MPI_CHECK(MPI_Comm_rank(g.comm, &me));
    g.counts.assign(size_t(n), 0);
    g.displs.assign(size_t(n), 0);
    int64_t total = 0;
    for (int m = 0; m < n; ++m) {
      int64_t c = 0;
      for (const auto& x : g.by_member[size_t(m)]) c += x.bytes;
      if (c > INT_MAX || total > INT_MAX) throw Error("gather: more than 2 GiB in one collective; use smaller units");
      g.counts[size_t(m)] = int(c);
      g.displs[size_t(m)] = int(total);
      total += c;
    }
    for (const auto& x : g.by_member[size_t(me)]) {
      const TrainerShards::Shard* s = ctx_.shards->find(x.hf);
      if (!s || !(s->box == x.box)) throw Error("gather: rank " + std::to_string(rank_) + " does not hold its piece of " +
                                                ctx_.model->param(x.hf).name);
      g.send.insert(g.send.end(), s->data.begin(), s->data.end());
    }
    g.receives = !g.to_root || me == 0;
    if (g.receives) g.recv.resize(size_t(total));
    staging_bytes_ += int64_t(g.send.size() + g.recv.size());
    if (g.to_root)
      MPI_CHECK(MPI_Igatherv(g.send.data(), int(g.send.size()), MPI_BYTE, g.recv.data(), g.counts.data(), g.displs.data(),
                             MPI_BYTE, 0, g.comm, &g.req));
    else
      MPI_CHECK(MPI_Iallgatherv(g.send.data(), int(g.send.size()), MPI_BYTE, g.recv.data(), g.counts.data(),
                                g.displs.data(), MPI_BYTE, g.comm, &g.req));
  }
  if (comms_.empty()) done_ = true;
}

UnitGather::~UnitGather() {
  // A gather still in flight at destruction means the run is failing; the process aborts.
  for (auto& g : comms_)
    if (g->req != MPI_REQUEST_NULL) MPI_Request_free(&g->req);
}

UnitGather::CommGather& UnitGather::comm_for(MPI_Comm comm, bool to_root, const std::vector<int>& members) {
  for (size_t i = 0; i < comms_.size(); ++i)
    if (comms_[i]->comm == comm && comms_[i]->to_root == to_root) return *comms_[i];
  auto g = std::make_unique<CommGather>();
  g->comm = comm;
  g->to_root = to_root;
  g->by_member.resize(members.size());
  comms_.push_back(std::move(g));
  comm_members_.push_back(members);
  return *comms_.back();
}

void UnitGather::plan_tensor(int32_t hf, SourcePolicy policy) {
  const TrainerPlacement& tr = *ctx_.trainer;
  const ParamMeta& p = ctx_.model->param(hf);
  const int64_t eb = dtype_bytes(p.dtype);
  // This rank's slab after the gather, if any.
  int64_t lo = 0, hi = 0;
  bool have = false;
  for (const Slab& s : source_slabs(tr, hf, policy))
    if (s.rank == rank_) {
      lo = s.lo;
      hi = s.hi;
      have = true;
    }
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int> members;
  bool to_root = false;
  if (policy == SourcePolicy::kRootOnly) {
    comm = ctx_.world->trainers;
    to_root = true;
    for (int r = 0; r < tr.world_size(); ++r) members.push_back(r);
    lo = 0;
    hi = p.numel();
  } else if (policy == SourcePolicy::kEverywhere) {
    comm = ctx_.world->trainers;
    for (int r = 0; r < tr.world_size(); ++r) members.push_back(r);
  } else {
    if (!have) return;  // not this rank's stage or expert
    int dp = tr.dp_rank_of(rank_), pp = tr.pp_rank_of(rank_);
    if (is_expert_kind(p.kind)) {
      comm = ctx_.world->etp_group;
      int ep = tr.ep_rank_of(rank_), edp = (rank_ / (tr.etp() * tr.ep())) % tr.edp();
      for (int et = 0; et < tr.etp(); ++et) members.push_back(tr.expert_rank(et, ep, edp, pp));
    } else {
      comm = ctx_.world->tp_group;
      for (int t = 0; t < tr.tp(); ++t) members.push_back(tr.dense_rank(t, dp, pp));
    }
  }
  // Pieces overlapping the slab, each from the first member holding it.
  int64_t row = p.numel() / p.shape[0];
  std::vector<std::pair<int, TrainerPlacement::Piece>> contributions;
  for (const auto& piece : tr.pieces(hf)) {
    int64_t plo = lo, phi = hi;  // a piece spanning dim 0 overlaps any slab
    if (p.shape.size() == 1 || piece.box.start[0] != 0 || piece.box.length[0] != p.shape[0]) {
      plo = piece.box.start[0] * row;  // a dim-0 range: exact
      phi = plo + piece.box.length[0] * row;
    }
    if (phi <= lo || plo >= hi) continue;
    int member = -1;
    for (size_t m = 0; m < members.size() && member < 0; ++m)
      if (std::find(piece.ranks.begin(), piece.ranks.end(), members[m]) != piece.ranks.end()) member = int(m);
    if (member < 0) throw Error("gather: no member of this rank's group holds a piece of " + p.name);
    contributions.emplace_back(member, piece);
  }
  bool needs_slab = policy != SourcePolicy::kRootOnly || rank_ == 0;
  // No communication when one piece is the slab and everyone who needs it holds it: every
  // member (all-gather) or the root (gather). The decision is the same on every member.
  if (contributions.size() == 1) {
    const auto& holders = contributions[0].second.ranks;
    auto holds = [&](int r) { return std::find(holders.begin(), holders.end(), r) != holders.end(); };
    bool no_comm = to_root ? holds(members[0]) : std::all_of(members.begin(), members.end(), holds);
    if (no_comm) {
      if (needs_slab) {
        const TrainerShards::Shard* s = ctx_.shards->find(hf);
        if (!s || s->box.numel() != hi - lo) throw Error("gather: shard of " + p.name + " is not its slab");
        slabs_[hf] = SlabRef{s->data.data(), lo, hi};
      }
      return;
    }
  }
  CommGather& g = comm_for(comm, to_root, members);
  for (const auto& [member, piece] : contributions)
    g.by_member[size_t(member)].push_back(Contribution{hf, piece.box, piece.box.numel() * eb});
  if (needs_slab) {
    auto o = std::make_unique<OwnedSlab>();
    o->hf = hf;
    o->lo = lo;
    o->hi = hi;
    o->data.resize(size_t((hi - lo) * eb));
    staging_bytes_ += int64_t(o->data.size());
    owned_by_hf_[hf] = o.get();
    slabs_[hf] = SlabRef{o->data.data(), lo, hi};
    owned_.push_back(std::move(o));
  }
}

void UnitGather::assemble(CommGather& g) {
  if (!g.receives) return;
  for (size_t m = 0; m < g.by_member.size(); ++m) {
    const uint8_t* src = g.recv.data() + g.displs[m];
    for (const auto& x : g.by_member[m]) {
      auto it = owned_by_hf_.find(x.hf);
      if (it != owned_by_hf_.end()) place_box(ctx_.model->param(x.hf), it->second->lo, x.box, src, it->second->data.data());
      src += x.bytes;
    }
  }
  staging_bytes_ -= int64_t(g.send.size() + g.recv.size());
  std::vector<uint8_t>().swap(g.send);
  std::vector<uint8_t>().swap(g.recv);
}

bool UnitGather::test() {
  if (done_) return true;
  bool all = true;
  for (auto& g : comms_) {
    if (g->req == MPI_REQUEST_NULL) continue;
    int flag = 0;
    MPI_CHECK(MPI_Test(&g->req, &flag, MPI_STATUS_IGNORE));
    if (flag) assemble(*g);
    else all = false;
  }
  done_ = all;
  return done_;
}

void UnitGather::wait() {
  while (!test()) {
  }
}

const SlabRef* UnitGather::slab(int32_t hf) const {
  auto it = slabs_.find(hf);
  return it == slabs_.end() ? nullptr : &it->second;
}

}  // namespace shardsync
