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

// The copy of a packed box into a slab (elements [lo, hi) of the tensor, dim-0 aligned).
CopyJob place_box(const ParamMeta& p, int64_t slab_lo, int64_t slab_hi, const Box& box, const uint8_t* packed,
                  uint8_t* slab) {
  std::vector<int64_t> shape = p.shape;
  int64_t row = p.numel() / shape[0];
  shape[0] = (slab_hi - slab_lo) / row;
  SubView dst = SubView::contiguous(shape);
  for (size_t d = 0; d < shape.size(); ++d)
    dst.narrow(int(d), d == 0 ? box.start[0] - slab_lo / row : box.start[d], box.length[d]);
  return CopyJob{packed, slab, make_copy_desc(SubView::contiguous(box.length), dst), int32_t(dtype_bytes(p.dtype))};
}

}  // namespace


UnitGather::UnitGather(const GatherContext& ctx, const Unit& unit, SourcePolicy policy) : ctx_(ctx) {
  rank_ = ctx.world->rank;
  for (int32_t hf : unit.tensors) plan_tensor(hf, policy);
  Device& dev = *ctx_.device;
  // One collective per group communicator for the whole unit.
  for (auto& gp : comms_) {
    CommGather& g = *gp;
    int n = int(g.by_member.size()), me = g.comm->rank();
    g.receives = !g.to_root || me == 0;
    g.reads = ctx_.weights_of != nullptr;
    for (int m = 0; m < n && g.reads; ++m) g.reads = g.comm->peer_region(m) != nullptr;
    if (g.reads) {
      read_members(g);
      continue;
    }
    g.counts.assign(size_t(n), 0);
    g.displs.assign(size_t(n), 0);
    int64_t total = 0;
    for (int m = 0; m < n; ++m) {
      for (const auto& x : g.by_member[size_t(m)]) g.counts[size_t(m)] += x.bytes;
      g.displs[size_t(m)] = total;
      total += g.counts[size_t(m)];
    }
    g.send = DeviceBuffer(&dev, g.counts[size_t(me)]);
    int64_t off = 0;
    for (const auto& x : g.by_member[size_t(me)]) {
      const TrainerShards::Shard* s = ctx_.shards->find(x.hf);
      if (!s || !(s->box == x.box))
        throw Error("gather: rank " + std::to_string(rank_) + " does not hold its piece of " + ctx_.model->param(x.hf).name);
      dev.memcpy(g.send.data() + off, ctx_.source->data(x.hf), x.bytes);
      off += x.bytes;
    }
    if (g.receives) g.recv = DeviceBuffer(&dev, total);
    staging_bytes_ += g.send.size() + g.recv.size();
    if (g.to_root)
      g.op = g.comm->gatherv(g.send.data(), g.send.size(), g.recv.data(), g.counts, g.displs, 0);
    else
      g.op = g.comm->allgatherv(g.send.data(), g.send.size(), g.recv.data(), g.counts, g.displs);
  }
  if (comms_.empty()) done_ = true;
}

// The members' pieces copied straight from their weights (mapped) into this rank's slabs:
// one device copy on the main lane, ordered before any pack of the slabs. The members'
// weights are filled before the sync starts (a barrier) and refilled only after every
// trainer has finished it (another).
void UnitGather::read_members(CommGather& g) {
  if (!g.receives) {
    g.done = true;
    return;
  }
  std::vector<CopyJob> jobs;
  for (size_t m = 0; m < g.by_member.size(); ++m) {
    const WeightsLayout& w = ctx_.weights_of(g.members[m]);
    const uint8_t* base = g.comm->peer_region(int(m)) + ctx_.weights_base;
    for (const auto& x : g.by_member[m]) {
      auto it = owned_by_hf_.find(x.hf);
      if (it == owned_by_hf_.end()) continue;
      if (w.offset.at(size_t(x.hf)) < 0 || !(w.box[size_t(x.hf)] == x.box))
        throw Error("gather: rank " + std::to_string(g.members[m]) + " does not hold the piece of " +
                    ctx_.model->param(x.hf).name + " its weights layout should");
      const uint8_t* at = ctx_.caller_shard ? ctx_.caller_shard(g.members[m], x.hf) : nullptr;
      jobs.push_back(place_box(ctx_.model->param(x.hf), it->second->lo, it->second->hi, x.box,
                               at ? at : base + w.offset[size_t(x.hf)], it->second->data.data()));
    }
  }
  ctx_.device->copy(jobs);
  g.copied = ctx_.device->fence(Lane::kMain);
}

UnitGather::CommGather& UnitGather::comm_for(GroupComm* comm, bool to_root, const std::vector<int>& members) {
  for (auto& g : comms_)
    if (g->comm == comm && g->to_root == to_root) return *g;
  auto g = std::make_unique<CommGather>();
  g->comm = comm;
  g->to_root = to_root;
  g->by_member.resize(members.size());
  g->members = members;
  comms_.push_back(std::move(g));
  return *comms_.back();
}

namespace {

// What `rank` does for one tensor under a policy: its slab after the gather, the group it
// gathers with and who contributes which piece. One place for the trainer's gather and for
// the consumers' question whether a slab is the trainer's own shard.
struct SlabPlan {
  bool have = false;     // this rank serves a slab of the tensor
  int64_t lo = 0, hi = 0;
  int group = 0;         // 0: every trainer, 1: TP group, 2: ETP group
  bool to_root = false;
  std::vector<int> members;
  std::vector<std::pair<int, TrainerPlacement::Piece>> contributions;  // (member, piece)
  bool needs_slab = false;
  bool no_comm = false;  // one piece is the slab and everyone who needs it holds it
};

SlabPlan plan_slab(const ModelSpec& model, const TrainerPlacement& tr, int32_t hf, SourcePolicy policy, int rank) {
  SlabPlan sp;
  const ParamMeta& p = model.param(hf);
  for (const Slab& s : source_slabs(tr, hf, policy))
    if (s.rank == rank) {
      sp.lo = s.lo;
      sp.hi = s.hi;
      sp.have = true;
    }
  if (policy == SourcePolicy::kRootOnly) {
    sp.to_root = true;
    for (int r = 0; r < tr.world_size(); ++r) sp.members.push_back(r);
    sp.lo = 0;
    sp.hi = p.numel();
  } else if (policy == SourcePolicy::kEverywhere) {
    for (int r = 0; r < tr.world_size(); ++r) sp.members.push_back(r);
  } else {
    if (!sp.have) return sp;  // not this rank's stage or expert
    int dp = tr.dp_rank_of(rank), pp = tr.pp_rank_of(rank);
    if (is_expert_kind(p.kind)) {
      sp.group = 2;
      int ep = tr.ep_rank_of(rank), edp = (rank / (tr.etp() * tr.ep())) % tr.edp();
      for (int et = 0; et < tr.etp(); ++et) sp.members.push_back(tr.expert_rank(et, ep, edp, pp));
    } else {
      sp.group = 1;
      for (int t = 0; t < tr.tp(); ++t) sp.members.push_back(tr.dense_rank(t, dp, pp));
    }
  }
  // Pieces overlapping the slab, each from the first member holding it.
  int64_t row = p.numel() / p.shape[0];
  for (const auto& piece : tr.pieces(hf)) {
    int64_t plo = sp.lo, phi = sp.hi;  // a piece spanning dim 0 overlaps any slab
    if (p.shape.size() == 1 || piece.box.start[0] != 0 || piece.box.length[0] != p.shape[0]) {
      plo = piece.box.start[0] * row;  // a dim-0 range: exact
      phi = plo + piece.box.length[0] * row;
    }
    if (phi <= sp.lo || plo >= sp.hi) continue;
    int member = -1;
    for (size_t m = 0; m < sp.members.size() && member < 0; ++m)
      if (std::find(piece.ranks.begin(), piece.ranks.end(), sp.members[m]) != piece.ranks.end()) member = int(m);
    if (member < 0) throw Error("gather: no member of this rank's group holds a piece of " + p.name);
    sp.contributions.emplace_back(member, piece);
  }
  sp.needs_slab = policy != SourcePolicy::kRootOnly || rank == 0;
  // No communication when one piece is the slab and everyone who needs it holds it: every
  // member (all-gather) or the root (gather). The decision is the same on every member.
  if (sp.contributions.size() == 1) {
    const auto& holders = sp.contributions[0].second.ranks;
    auto holds = [&](int r) { return std::find(holders.begin(), holders.end(), r) != holders.end(); };
    sp.no_comm = sp.to_root ? holds(sp.members[0]) : std::all_of(sp.members.begin(), sp.members.end(), holds);
  }
  return sp;
}

}  // namespace

bool slab_is_own_shard(const ModelSpec& model, const TrainerPlacement& trainer, int32_t hf, SourcePolicy policy,
                       int rank) {
  if (policy == SourcePolicy::kDirect) return true;
  const SlabPlan sp = plan_slab(model, trainer, hf, policy, rank);
  return sp.have && sp.needs_slab && sp.no_comm;
}

void UnitGather::plan_tensor(int32_t hf, SourcePolicy policy) {
  const ParamMeta& p = ctx_.model->param(hf);
  const int64_t eb = dtype_bytes(p.dtype);
  if (policy == SourcePolicy::kDirect) {  // no gather: pulls read this rank's own shard
    if (const TrainerShards::Shard* s = ctx_.shards->find(hf)) slabs_[hf] = SlabRef{ctx_.source->data(hf), 0, s->box.numel()};
    return;
  }
  const SlabPlan sp = plan_slab(*ctx_.model, *ctx_.trainer, hf, policy, rank_);
  if (policy != SourcePolicy::kRootOnly && policy != SourcePolicy::kEverywhere && !sp.have) return;
  const int64_t lo = sp.lo, hi = sp.hi;
  GroupComm* comm = sp.group == 0 ? ctx_.trainers : sp.group == 1 ? ctx_.tp_group : ctx_.etp_group;
  const bool to_root = sp.to_root;
  const bool needs_slab = sp.needs_slab;
  const auto& members = sp.members;
  const auto& contributions = sp.contributions;
  if (sp.no_comm) {
    if (needs_slab) {
      const TrainerShards::Shard* s = ctx_.shards->find(hf);
      if (!s || s->box.numel() != hi - lo) throw Error("gather: shard of " + p.name + " is not its slab");
      slabs_[hf] = SlabRef{ctx_.source->data(hf), lo, hi};
    }
    return;
  }
  CommGather& g = comm_for(comm, to_root, members);
  for (const auto& [member, piece] : contributions)
    g.by_member[size_t(member)].push_back(Contribution{hf, piece.box, piece.box.numel() * eb});
  if (needs_slab) {
    auto o = std::make_unique<OwnedSlab>();
    o->hf = hf;
    o->lo = lo;
    o->hi = hi;
    o->data = DeviceBuffer(ctx_.device, (hi - lo) * eb);
    staging_bytes_ += o->data.size();
    owned_by_hf_[hf] = o.get();
    slabs_[hf] = SlabRef{o->data.data(), lo, hi};
    owned_.push_back(std::move(o));
  }
}

void UnitGather::assemble(CommGather& g) {
  if (!g.receives) return;
  std::vector<CopyJob> jobs;
  for (size_t m = 0; m < g.by_member.size(); ++m) {
    const uint8_t* src = g.recv.data() + g.displs[m];
    for (const auto& x : g.by_member[m]) {
      auto it = owned_by_hf_.find(x.hf);
      if (it != owned_by_hf_.end())
        jobs.push_back(place_box(ctx_.model->param(x.hf), it->second->lo, it->second->hi, x.box, src,
                                 it->second->data.data()));
      src += x.bytes;
    }
  }
  ctx_.device->copy(jobs);  // main lane: ordered before any pack of these slabs
}

bool UnitGather::test() {
  if (done_) return true;
  bool all = true;
  for (auto& g : comms_) {
    if (g->done) continue;
    if (g->reads) {
      g->done = ctx_.device->done(g->copied);
      all = all && g->done;
      continue;
    }
    if (g->comm->test(*g->op)) {
      assemble(*g);
      g->done = true;
    } else {
      all = false;
    }
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
