#include "plan/dedupe.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "common/error.hpp"

namespace shardsync {

namespace {

// A copy's destination places as a set, whatever the source's loops: the loops by their
// destination step, widest outermost, merged where they step exactly over each other.
CopyDesc dst_places(const CopyDesc& copy) {
  CopyDesc d;
  d.dst_offset = copy.dst_offset;
  d.numel = copy.numel;
  for (const CopyDim& x : copy.dims) d.dims.push_back(CopyDim{x.size, x.dst_stride, x.dst_stride});
  std::stable_sort(d.dims.begin(), d.dims.end(), [](const CopyDim& a, const CopyDim& b) { return a.dst_stride > b.dst_stride; });
  coalesce(d);
  return d;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> dst_runs(const CopyDesc& copy, int64_t eb, size_t max_runs) {
  if (copy.numel <= 0) return {};
  const CopyDesc d = dst_places(copy);
  const CopyDim inner = d.dims.back();
  const bool dense = inner.dst_stride == 1;
  size_t count = dense ? 1 : size_t(inner.size);
  for (size_t i = 0; i + 1 < d.dims.size(); ++i) {
    count *= size_t(d.dims[i].size);
    if (count > max_runs) return {};
  }
  if (count > max_runs) return {};
  std::vector<std::pair<int64_t, int64_t>> runs;
  runs.reserve(count);
  const int64_t run = dense ? inner.size : 1;
  std::vector<int64_t> idx(d.dims.size(), 0);
  const size_t outer = dense ? d.dims.size() - 1 : d.dims.size();
  for (;;) {
    int64_t at = copy.dst_offset;
    for (size_t i = 0; i < outer; ++i) at += idx[i] * d.dims[i].dst_stride;
    runs.emplace_back(at * eb, run * eb);
    size_t k = outer;
    while (k > 0) {
      --k;
      if (++idx[k] < d.dims[k].size) break;
      idx[k] = 0;
      if (k == 0) return runs;
    }
    if (outer == 0) return runs;
  }
}

namespace {

// What makes two ranks' entries the same bytes at the same place (see the header).
struct PieceKey {
  int32_t hf;
  std::string param;
  std::vector<int64_t> shape_and_copy;
  auto operator<=>(const PieceKey&) const = default;
};

PieceKey piece_key(const RankPlan& plan, const PlanEntry& e) {
  const EngineParam& ep = plan.params[size_t(e.engine_param)];
  PieceKey k{e.hf_param, ep.name, {int64_t(ep.dtype), int64_t(ep.shape.size())}};
  auto& v = k.shape_and_copy;
  v.insert(v.end(), ep.shape.begin(), ep.shape.end());
  v.insert(v.end(), {e.copy.src_offset, e.copy.dst_offset, e.copy.numel, int64_t(e.copy.dims.size())});
  for (const CopyDim& d : e.copy.dims) v.insert(v.end(), {d.size, d.src_stride, d.dst_stride});
  return k;
}

}  // namespace

NodeDedupe dedupe_node(const ModelSpec& model, const std::vector<RankPlan>& plans, int replicas, Routes& routes,
                       const std::vector<int>& host_of_local, const std::function<bool(int32_t)>& shareable) {
  const size_t n = plans.size();
  if (host_of_local.size() != n || routes.pulls.size() != n)
    throw Error("dedupe_node: " + std::to_string(host_of_local.size()) + " hosts and " +
                std::to_string(routes.pulls.size()) + " routes for " + std::to_string(n) + " local ranks");
  NodeDedupe out;
  out.shares.resize(n);
  out.network_bytes.assign(n, 0);
  out.node_bytes.assign(n, 0);
  out.sharers.resize(n);

  // Per local rank and entry: its pulls' bytes on the network (the HF tensor's dtype).
  std::vector<std::map<int32_t, int64_t>> entry_bytes(n);
  for (size_t l = 0; l < n; ++l) {
    const RankPlan& p = plans[l];
    if (size_t(p.local_rank) != l) throw Error("dedupe_node: plans out of local rank order");
    for (const Pull& pull : routes.pulls[l]) {
      const PlanEntry& e = p.entries[size_t(pull.entry)];
      if (!e.is_fill()) entry_bytes[l][pull.entry] += pull.copy.numel * dtype_bytes(model.param(e.hf_param).dtype);
    }
  }
  struct Need {
    int local;
    int32_t entry;
    int64_t bytes;  // on the network
    std::vector<std::pair<int64_t, int64_t>> runs;
  };
  std::map<std::pair<int, PieceKey>, std::vector<Need>> needs;  // (host, entry) -> ranks needing it
  for (size_t l = 0; l < n; ++l) {
    const RankPlan& p = plans[l];
    for (const auto& [entry, bytes] : entry_bytes[l]) {
      const PlanEntry& e = p.entries[size_t(entry)];
      if (!shareable(e.hf_param)) continue;
      auto runs = dst_runs(e.copy, dtype_bytes(p.params[size_t(e.engine_param)].dtype), kMaxShareRuns);
      if (runs.empty()) continue;
      needs[{host_of_local[l], piece_key(p, e)}].push_back(Need{int(l), entry, bytes, std::move(runs)});
    }
  }
  // Network bytes so far: every entry no other rank of the node needs.
  std::vector<std::set<int32_t>> shared(n);
  for (const auto& [key, who] : needs)
    if (who.size() > 1)
      for (const Need& w : who) shared[size_t(w.local)].insert(w.entry);
  for (size_t l = 0; l < n; ++l)
    for (const auto& [entry, bytes] : entry_bytes[l])
      if (!shared[l].count(entry)) out.network_bytes[l] += bytes;

  // Shared entries largest first (then in HF tensor order): each to its least-loaded needer.
  std::vector<const std::pair<const std::pair<int, PieceKey>, std::vector<Need>>*> order;
  for (const auto& kv : needs)
    if (kv.second.size() > 1) order.push_back(&kv);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    if (a->second.front().bytes != b->second.front().bytes) return a->second.front().bytes > b->second.front().bytes;
    return a->first.second.hf < b->first.second.hf;
  });
  std::vector<std::set<int32_t>> drop(n);
  std::vector<std::set<int>> sharers(n);
  for (const auto* kv : order) {
    const std::vector<Need>& who = kv->second;
    const Need* puller = &who.front();
    for (const Need& w : who)
      if (out.network_bytes[size_t(w.local)] < out.network_bytes[size_t(puller->local)] ||
          (out.network_bytes[size_t(w.local)] == out.network_bytes[size_t(puller->local)] && w.local < puller->local))
        puller = &w;
    out.network_bytes[size_t(puller->local)] += puller->bytes;
    for (const Need& w : who) {
      if (&w == puller) continue;
      int64_t copied = 0;
      for (const auto& r : w.runs) copied += r.second;
      const PlanEntry& e = plans[size_t(w.local)].entries[size_t(w.entry)];
      out.shares[size_t(w.local)].push_back(Share{puller->local, w.entry, puller->entry, e.copy, copied, w.runs});
      out.node_bytes[size_t(w.local)] += copied;
      drop[size_t(w.local)].insert(w.entry);
      sharers[size_t(puller->local)].insert(w.local);
    }
  }
  for (size_t l = 0; l < n; ++l) {
    out.sharers[l].assign(sharers[l].begin(), sharers[l].end());
    std::sort(out.shares[l].begin(), out.shares[l].end(), [](const Share& a, const Share& b) { return a.entry < b.entry; });
    std::vector<Pull> kept;
    for (const Pull& pull : routes.pulls[l]) {
      if (!drop[l].count(pull.entry)) {
        kept.push_back(pull);
        continue;
      }
      const int64_t bytes = pull.copy.numel * dtype_bytes(model.param(plans[l].entries[size_t(pull.entry)].hf_param).dtype);
      routes.served_bytes[size_t(pull.trainer_rank)] -= bytes * replicas;
      routes.served_pulls[size_t(pull.trainer_rank)] -= replicas;
    }
    routes.pulls[l] = std::move(kept);
  }
  return out;
}

}  // namespace shardsync
