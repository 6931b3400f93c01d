#include "plan/routes.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "plan/box_copy.hpp"

namespace shardsync {

std::vector<Slab> source_slabs(const TrainerPlacement& trainer, int32_t hf_param, SourcePolicy policy) {
  const ParamMeta& p = trainer.model().param(hf_param);
  const int64_t n = p.numel();
  std::vector<Slab> out;
  if (policy == SourcePolicy::kDirect) throw Error("source_slabs: direct pulls read trainer shards, not slabs");
  if (policy == SourcePolicy::kRootOnly) return {Slab{0, 0, n}};
  if (policy == SourcePolicy::kEverywhere) {
    for (int r = 0; r < trainer.world_size(); ++r) out.push_back({r, 0, n});
    return out;
  }
  bool fused = p.kind == TensorKind::kFusedExpertsGateUp || p.kind == TensorKind::kFusedExpertsDown;
  if (fused && trainer.ep() > 1) {
    // Each EP owner, after its ETP gather, holds its experts: a dim-0 slab.
    int64_t per_expert = n / p.shape[0];
    for (const auto& piece : trainer.pieces(hf_param)) {
      int64_t lo = piece.box.start[0] * per_expert, hi = lo + piece.box.length[0] * per_expert;
      for (int r : piece.ranks) out.push_back({r, lo, hi});
    }
  } else {
    // TP/ETP gather: every rank that held a piece now holds the full tensor.
    for (const auto& piece : trainer.pieces(hf_param))
      for (int r : piece.ranks) out.push_back({r, 0, n});
  }
  std::sort(out.begin(), out.end(), [](const Slab& a, const Slab& b) { return a.rank < b.rank || (a.rank == b.rank && a.lo < b.lo); });
  out.erase(std::unique(out.begin(), out.end(), [](const Slab& a, const Slab& b) {
              return a.rank == b.rank && a.lo == b.lo && a.hi == b.hi;
            }), out.end());
  return out;
}

namespace {

class Router {
 public:
  Router(Routes& routes, int replicas, int64_t elem_bytes) : routes_(routes), replicas_(replicas), eb_(elem_bytes) {}

  void route(int local_rank, int32_t entry, const CopyDesc& d, const std::vector<Slab>& slabs) {
    local_rank_ = local_rank;
    entry_ = entry;
    slabs_ = &slabs;
    assign(d);
  }

 private:
  // The least-loaded slab containing [lo, hi).
  const Slab* pick(int64_t lo, int64_t hi) const {
    const Slab* best = nullptr;
    for (const Slab& s : *slabs_) {
      if (lo < s.lo || hi > s.hi) continue;
      if (!best || routes_.served_bytes[size_t(s.rank)] < routes_.served_bytes[size_t(best->rank)]) best = &s;
    }
    return best;
  }

  void emit(const CopyDesc& d, const Slab& s) {
    routes_.pulls[size_t(local_rank_)].push_back(Pull{entry_, s.rank, s.lo, d});
    routes_.served_bytes[size_t(s.rank)] += d.numel * eb_ * replicas_;
    routes_.served_pulls[size_t(s.rank)] += replicas_;
  }

  void assign(const CopyDesc& d) {
    int64_t lo = 0, hi = 0;
    source_range(d, &lo, &hi);
    if (const Slab* s = pick(lo, hi)) {
      emit(d, *s);
      return;
    }
    // No single holder: split along the outermost loop, grouping neighbours that share a holder.
    const CopyDim outer = d.dims.front();
    if (d.dims.size() == 1) {
      split_run(d);
      return;
    }
    CopyDesc inner = d;
    inner.dims.erase(inner.dims.begin());
    inner.numel = d.numel / outer.size;
    int64_t i = 0;
    while (i < outer.size) {
      CopyDesc first = inner;
      first.src_offset += i * outer.src_stride;
      first.dst_offset += i * outer.dst_stride;
      int64_t a = 0, b = 0;
      source_range(first, &a, &b);
      const Slab* s = pick(a, b);
      if (!s) {  // even one slice spans holders
        assign(first);
        ++i;
        continue;
      }
      int64_t j = i + 1;
      while (j < outer.size) {
        CopyDesc next = inner;
        next.src_offset += j * outer.src_stride;
        int64_t c = 0, e = 0;
        source_range(next, &c, &e);
        if (c < s->lo || e > s->hi) break;
        ++j;
      }
      CopyDesc run = d;
      run.src_offset += i * outer.src_stride;
      run.dst_offset += i * outer.dst_stride;
      run.dims.front().size = j - i;
      run.numel = inner.numel * (j - i);
      emit(run, *s);
      i = j;
    }
  }

  // A single strided run crossing slab boundaries: cut it where the holder changes.
  void split_run(const CopyDesc& d) {
    const CopyDim x = d.dims.front();
    int64_t i = 0;
    while (i < x.size) {
      int64_t pos = d.src_offset + i * x.src_stride;
      const Slab* s = pick(pos, pos + 1);
      if (!s) throw Error("routes: no trainer rank holds element " + std::to_string(pos) + " of an HF tensor");
      int64_t j = i + 1;
      while (j < x.size && d.src_offset + j * x.src_stride < s->hi && d.src_offset + j * x.src_stride >= s->lo) ++j;
      CopyDesc run = d;
      run.src_offset = pos;
      run.dst_offset = d.dst_offset + i * x.dst_stride;
      run.dims.front().size = j - i;
      run.numel = j - i;
      emit(run, *s);
      i = j;
    }
  }

  Routes& routes_;
  int replicas_;
  int64_t eb_;
  int local_rank_ = 0;
  int32_t entry_ = 0;
  const std::vector<Slab>* slabs_ = nullptr;
};

// V4: each piece from a trainer shard holding it, its source re-based into that shard.
class DirectRouter {
 public:
  DirectRouter(Routes& routes, int replicas) : routes_(routes), replicas_(replicas) {}

  void route(int local_rank, int32_t entry, const ParamMeta& p, const CopyDesc& d,
             const std::vector<TrainerPlacement::Piece>& pieces) {
    local_rank_ = local_rank;
    entry_ = entry;
    pieces_ = &pieces;
    eb_ = dtype_bytes(p.dtype);
    for (const CoordCopy& c : to_coords(d, p.shape)) assign(c);
  }

 private:
  static bool inside(const Box& in, const Box& box) {
    for (size_t k = 0; k < in.start.size(); ++k)
      if (in.start[k] < box.start[k] || in.start[k] + in.length[k] > box.start[k] + box.length[k]) return false;
    return true;
  }

  // The piece whose box holds `b` (boxes of one replica do not overlap).
  const TrainerPlacement::Piece* holder(const Box& b) const {
    for (const auto& piece : *pieces_)
      if (inside(b, piece.box)) return &piece;
    return nullptr;
  }

  void emit(const CoordCopy& c, const TrainerPlacement::Piece& piece) {
    int best = piece.ranks.front();
    for (int r : piece.ranks)
      if (routes_.served_bytes[size_t(r)] < routes_.served_bytes[size_t(best)]) best = r;
    routes_.pulls[size_t(local_rank_)].push_back(Pull{entry_, best, 0, rebase_into(c, piece.box)});
    routes_.served_bytes[size_t(best)] += c.flat.numel * eb_ * replicas_;
    routes_.served_pulls[size_t(best)] += replicas_;
  }

  // Where no two loops step along the same tensor dimension, the part of the copy inside a
  // box is one interval of each loop: cut it out for every shard it meets.
  bool cut_separable(const CoordCopy& c) {
    const size_t nd = c.base.size(), nl = c.flat.dims.size();
    for (size_t k = 0; k < nd; ++k) {
      int loops = 0;
      for (size_t m = 0; m < nl; ++m) loops += c.flat.dims[m].size > 1 && c.steps[m][k] != 0;
      if (loops > 1) return false;
    }
    for (const auto& piece : *pieces_) {
      std::vector<int64_t> from(nl, 0), to(nl);
      for (size_t m = 0; m < nl; ++m) to[m] = c.flat.dims[m].size;
      bool meets = true;
      for (size_t k = 0; k < nd && meets; ++k) {
        const int64_t lo = piece.box.start[k], hi = lo + piece.box.length[k];
        size_t m = 0;
        while (m < nl && !(c.flat.dims[m].size > 1 && c.steps[m][k] != 0)) ++m;
        if (m == nl) {  // no loop moves along k: the base decides
          meets = c.base[k] >= lo && c.base[k] < hi;
          continue;
        }
        const int64_t a = c.steps[m][k], b = c.base[k];
        auto ceil_div = [](int64_t x, int64_t y) { return x >= 0 ? (x + y - 1) / y : -((-x) / y); };
        from[m] = std::max(from[m], ceil_div(lo - b, a));
        to[m] = std::min(to[m], ceil_div(hi - b, a));
        meets = from[m] < to[m];
      }
      if (!meets) continue;
      CoordCopy part = c;
      for (size_t m = nl; m-- > 0;)  // inner first: dropping a loop leaves outer indices alone
        if (from[m] != 0 || to[m] != c.flat.dims[m].size) part = part.slice(m, from[m], to[m] - from[m]);
      emit(part, piece);
    }
    return true;
  }

  void assign(const CoordCopy& c) {
    if (const auto* piece = holder(c.bounds())) {
      emit(c, *piece);
      return;
    }
    if (cut_separable(c)) return;
    // Loops share a dimension (a head permutation): cut the outermost loop into runs of
    // iterations with one holder.
    size_t m = 0;
    while (m < c.flat.dims.size() && c.flat.dims[m].size <= 1) ++m;
    if (m == c.flat.dims.size()) throw Error("routes: no trainer shard holds an element of an HF tensor");
    const int64_t n = c.flat.dims[m].size;
    int64_t i = 0;
    while (i < n) {
      CoordCopy one = c.slice(m, i, 1);
      const auto* piece = holder(one.bounds());
      if (!piece) {
        assign(one);
        ++i;
        continue;
      }
      int64_t j = i + 1;
      while (j < n && inside(c.slice(m, j, 1).bounds(), piece->box)) ++j;
      emit(c.slice(m, i, j - i), *piece);
      i = j;
    }
  }

  Routes& routes_;
  int replicas_;
  int64_t eb_ = 1;
  int local_rank_ = 0;
  int32_t entry_ = 0;
  const std::vector<TrainerPlacement::Piece>* pieces_ = nullptr;
};

}  // namespace

Routes route_plans(const ModelSpec& model, const TrainerPlacement& trainer, const std::vector<RankPlan>& plans,
                   int replicas, SourcePolicy policy) {
  Routes routes;
  routes.pulls.resize(plans.size());
  routes.served_bytes.assign(size_t(trainer.world_size()), 0);
  routes.served_pulls.assign(size_t(trainer.world_size()), 0);
  // Walk HF tensors in checkpoint order, all ranks per tensor, so the greedy balance sees
  // every consumer of a tensor together.
  struct Item {
    int32_t hf;
    int rank;
    int32_t entry;
  };
  std::vector<Item> items;
  for (const RankPlan& plan : plans)
    for (int32_t e = 0; e < int32_t(plan.entries.size()); ++e)
      if (!plan.entries[size_t(e)].is_fill()) items.push_back({plan.entries[size_t(e)].hf_param, plan.local_rank, e});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.hf < b.hf; });
  int32_t cached_hf = -1;
  std::vector<Slab> slabs;
  std::vector<TrainerPlacement::Piece> pieces;
  for (const Item& it : items) {
    const CopyDesc& copy = plans[size_t(it.rank)].entries[size_t(it.entry)].copy;
    if (it.hf != cached_hf) {
      if (policy == SourcePolicy::kDirect) pieces = trainer.pieces(it.hf);
      else slabs = source_slabs(trainer, it.hf, policy);
      cached_hf = it.hf;
    }
    if (policy == SourcePolicy::kDirect) {
      DirectRouter(routes, replicas).route(it.rank, it.entry, model.param(it.hf), copy, pieces);
    } else {
      Router router(routes, replicas, dtype_bytes(model.param(it.hf).dtype));
      router.route(it.rank, it.entry, copy, slabs);
    }
  }
  for (auto& pulls : routes.pulls)
    std::stable_sort(pulls.begin(), pulls.end(), [](const Pull& a, const Pull& b) { return a.entry < b.entry; });
  return routes;
}

}  // namespace shardsync
