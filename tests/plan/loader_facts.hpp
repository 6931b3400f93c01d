// Hand-written facts about vLLM's loaders (issue 41), checked against recorded plans.
//
// The replay tests (test_plan.cpp) compare the plan with our own loaders run on real bytes,
// so a loader bug would sit in both. These facts are written by hand from vLLM's loader
// semantics and a published config.json: which box of which HF tensor lands in which box of
// which engine parameter on one inference rank. Nothing here calls the project's layout or
// loader helpers to compute an expectation; the plan is the only thing under test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "layout/parse.hpp"
#include "plan/plan.hpp"

namespace shardsync::facts {

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end)
};
using Box = std::vector<Range>;  // one range per dimension
inline Range at(int64_t begin, int64_t n) {
  return {begin, begin + n};
}  // n elements from begin
inline Range all(int64_t n) {
  return {0, n};
}  // a whole dimension

// Source box `src` of HF tensor `hf` lands in box `dst` of engine parameter `param`. The boxes'
// dimensions of extent > 1 pair up in order, or as `order` says (destination's k-th such
// dimension is the source's order[k]-th: a transpose). `src_row`, if set, maps a row offset
// inside the destination box to the row offset it reads inside the source box (Llama-4's rope
// permutation); columns are unaffected.
struct Copy {
  std::string hf;
  Box src;
  std::string param;
  Box dst;
  std::vector<int> order = {};
  std::function<int64_t(int64_t)> src_row = nullptr;
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;
};

struct Fill {  // a zero-filled box (vocab padding, gpt-oss's w2_bias off MoE-TP rank 0)
  std::string param;
  Box dst;
};

struct RankFacts {
  int rank = 0;
  std::vector<Param> params;           // engine parameters this rank has (name, per-rank shape)
  std::vector<std::string> no_params;  // engine parameters it must not have
  std::vector<Copy> copies;            // every copy of each HF tensor named here
  std::vector<std::string> absent;     // HF tensors this rank takes nothing of
  std::vector<Fill> fills;             // zero fills of the parameters named here, all of them
};

// Per-expert checkpoint name: "<layer>mlp.experts.<e>.<part>.weight".
inline std::string expert(const std::string& layer, int64_t e, const char* part) {
  return layer + "mlp.experts." + std::to_string(e) + "." + part + ".weight";
}

// A tensor loaded whole into an engine parameter of the same shape (norms, routers,
// replicated linears, row-parallel biases).
inline Copy whole(const std::string& hf, const std::string& param,
                  const std::vector<int64_t>& shape) {
  Box b;
  for (int64_t n : shape) b.push_back(all(n));
  return {hf, b, param, b};
}

inline int64_t flat_index(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

inline std::vector<int64_t> multi_index(int64_t f, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = f % shape[d];
    f /= shape[d];
  }
  return idx;
}

inline std::vector<int64_t> box_first(const Box& b) {
  std::vector<int64_t> v;
  for (const Range& r : b) v.push_back(r.begin);
  return v;
}

inline std::vector<int64_t> box_last(const Box& b) {
  std::vector<int64_t> v;
  for (const Range& r : b) v.push_back(r.end - 1);
  return v;
}

inline int64_t box_volume(const Box& b) {
  int64_t n = 1;
  for (const Range& r : b) n *= r.end - r.begin;
  return n;
}

inline int32_t param_index(const RankPlan& plan, const std::string& name) {
  for (size_t i = 0; i < plan.params.size(); ++i)
    if (plan.params[i].name == name) return int32_t(i);
  return -1;
}

inline void check_copy(const ModelSpec& m, const RankPlan& plan, const Copy& c) {
  SCOPED_TRACE(c.hf + " -> " + c.param);
  const int32_t hf = m.find(c.hf);
  ASSERT_GE(hf, 0) << "no such HF tensor in the catalog";
  const std::vector<int64_t>& hs = m.param(hf).shape;
  const int32_t pi = param_index(plan, c.param);
  ASSERT_GE(pi, 0) << "no such engine parameter on rank " << plan.local_rank;
  const std::vector<int64_t>& ps = plan.params[size_t(pi)].shape;
  ASSERT_EQ(c.src.size(), hs.size());
  ASSERT_EQ(c.dst.size(), ps.size());
  for (size_t d = 0; d < hs.size(); ++d)
    ASSERT_TRUE(0 <= c.src[d].begin && c.src[d].end <= hs[d]) << "src dim " << d;
  for (size_t d = 0; d < ps.size(); ++d)
    ASSERT_TRUE(0 <= c.dst[d].begin && c.dst[d].end <= ps[d]) << "dst dim " << d;
  std::vector<int> sn, dn;  // dimensions of extent > 1
  for (size_t d = 0; d < hs.size(); ++d)
    if (c.src[d].end - c.src[d].begin > 1) sn.push_back(int(d));
  for (size_t d = 0; d < ps.size(); ++d)
    if (c.dst[d].end - c.dst[d].begin > 1) dn.push_back(int(d));
  ASSERT_EQ(sn.size(), dn.size()) << "the two boxes do not pair up";
  std::vector<int> order = c.order;
  if (order.empty()) {
    order.resize(dn.size());
    std::iota(order.begin(), order.end(), 0);
  }
  ASSERT_EQ(order.size(), dn.size());
  for (size_t k = 0; k < dn.size(); ++k) {
    const Range& s = c.src[size_t(sn[size_t(order[k])])];
    const Range& t = c.dst[size_t(dn[k])];
    ASSERT_EQ(s.end - s.begin, t.end - t.begin) << "extent of destination dim " << dn[k];
  }

  // The one entry of this tensor that starts at the box's first element.
  const int64_t dst_lo = flat_index(box_first(c.dst), ps),
                dst_hi = flat_index(box_last(c.dst), ps) + 1;
  const PlanEntry* e = nullptr;
  for (const PlanEntry& x : plan.entries) {
    if (x.hf_param != hf || x.engine_param != pi) continue;
    int64_t lo = 0, hi = 0;
    dest_range(x.copy, &lo, &hi);
    if (lo != dst_lo) continue;
    ASSERT_EQ(e, nullptr) << "two entries start at destination element " << dst_lo;
    e = &x;
  }
  ASSERT_NE(e, nullptr) << "no entry lands at destination element " << dst_lo;
  EXPECT_EQ(e->numel(), box_volume(c.dst));
  int64_t lo = 0, hi = 0;
  dest_range(e->copy, &lo, &hi);
  EXPECT_EQ(hi, dst_hi) << "destination end";
  source_range(e->copy, &lo, &hi);
  EXPECT_EQ(lo, flat_index(box_first(c.src), hs)) << "source start";
  EXPECT_EQ(hi, flat_index(box_last(c.src), hs) + 1) << "source end";

  // Element by element: the first, middle and last element of each run of the copy (of
  // every run, or of an even sample of them when there are very many).
  auto expected_src = [&](int64_t dst_flat) -> int64_t {
    std::vector<int64_t> d = multi_index(dst_flat, ps);
    std::vector<int64_t> s = box_first(c.src);
    for (size_t k = 0; k < dn.size(); ++k) {
      int64_t rel = d[size_t(dn[k])] - c.dst[size_t(dn[k])].begin;
      s[size_t(sn[size_t(order[k])])] += rel;
    }
    for (size_t dd = 0; dd < ps.size(); ++dd)
      if (d[dd] < c.dst[dd].begin || d[dd] >= c.dst[dd].end) return -1;  // outside the box
    if (c.src_row) s[0] = c.src[0].begin + c.src_row(s[0] - c.src[0].begin);
    return flat_index(s, hs);
  };
  const int64_t runs = e->copy.dims.empty() ? 0 : e->numel() / e->copy.dims.back().size;
  const int64_t step = std::max<int64_t>(1, runs / 16384);
  int64_t run = 0, bad = 0;
  for_each_run(e->copy, [&](int64_t src, int64_t dst, int64_t len, int64_t ss, int64_t ds) {
    if (run++ % step != 0 && run != runs) return;
    for (int64_t k : {int64_t(0), len / 2, len - 1}) {
      int64_t want = expected_src(dst + k * ds);
      if (want != src + k * ss && bad++ < 5)
        ADD_FAILURE() << "destination element " << dst + k * ds << " "
                      << ::testing::PrintToString(multi_index(dst + k * ds, ps))
                      << " reads source element "
                      << ::testing::PrintToString(multi_index(src + k * ss, hs)) << ", expected "
                      << (want < 0 ? std::string("none (outside the box)")
                                   : ::testing::PrintToString(multi_index(want, hs)));
    }
  });
}

inline void check_fill(const RankPlan& plan, const Fill& f) {
  SCOPED_TRACE("zero fill of " + f.param);
  const int32_t pi = param_index(plan, f.param);
  ASSERT_GE(pi, 0);
  const std::vector<int64_t>& ps = plan.params[size_t(pi)].shape;
  const int64_t want_lo = flat_index(box_first(f.dst), ps),
                want_hi = flat_index(box_last(f.dst), ps) + 1;
  int found = 0;
  for (const PlanEntry& x : plan.entries) {
    if (!x.is_fill() || x.engine_param != pi) continue;
    int64_t lo = 0, hi = 0;
    dest_range(x.copy, &lo, &hi);
    if (lo != want_lo) continue;
    ++found;
    EXPECT_EQ(hi, want_hi);
    EXPECT_EQ(x.numel(), box_volume(f.dst));
  }
  EXPECT_EQ(found, 1);
}

// Records the plan of `rank` in `layout` (one replica) and checks every fact about it.
inline void check_rank(const ModelSpec& m, const std::string& layout, const RankFacts& f) {
  SCOPED_TRACE(m.name() + " " + layout + " rank " + std::to_string(f.rank));
  InferenceLayout l = parse_inference_spec(layout);
  l.replicas = 1;
  InferencePlacement inf(m, l);
  const RankPlan plan = record_rank_plan(m, inf, f.rank);
  for (const Param& p : f.params) {
    int32_t i = param_index(plan, p.name);
    EXPECT_GE(i, 0) << "no engine parameter " << p.name;
    if (i < 0) continue;
    EXPECT_EQ(plan.params[size_t(i)].shape, p.shape) << p.name;
    EXPECT_EQ(plan.params[size_t(i)].dtype, p.dtype) << p.name;
  }
  for (const std::string& n : f.no_params)
    EXPECT_LT(param_index(plan, n), 0) << "unexpected engine parameter " << n;
  // Every copy of a named HF tensor is listed: nothing more is pulled from it.
  std::map<std::string, int> listed;
  for (const Copy& c : f.copies) listed[c.hf]++;
  for (const auto& [name, count] : listed) {
    int n = 0;
    for (const PlanEntry& x : plan.entries) n += x.hf_param >= 0 && x.hf_param == m.find(name);
    EXPECT_EQ(n, count) << "entries of " << name;
  }
  for (const Copy& c : f.copies) check_copy(m, plan, c);
  for (const std::string& a : f.absent) {
    EXPECT_GE(m.find(a), 0) << "no HF tensor " << a;
    int n = 0;
    for (const PlanEntry& x : plan.entries) n += x.hf_param >= 0 && x.hf_param == m.find(a);
    EXPECT_EQ(n, 0) << a << " should load nothing on this rank";
  }
  // Zero fills of the parameters named here are all listed (none: no vocab padding).
  std::vector<bool> named(plan.params.size(), false);
  auto mark = [&](const std::string& n) {
    if (int32_t i = param_index(plan, n); i >= 0) named[size_t(i)] = true;
  };
  for (const Param& p : f.params) mark(p.name);
  for (const Copy& c : f.copies) mark(c.param);
  for (const Fill& z : f.fills) mark(z.param);
  int fills = 0;
  for (const PlanEntry& x : plan.entries) fills += x.is_fill() && named[size_t(x.engine_param)];
  EXPECT_EQ(fills, int(f.fills.size())) << "zero fills of the parameters named";
  for (const Fill& z : f.fills) check_fill(plan, z);
}

}  // namespace shardsync::facts
