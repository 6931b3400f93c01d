// A copy's source seen in the coordinates of its row-major tensor, so that it can be cut at
// the edges of boxes (trainer shards) and re-based into one: what V4 needs to pull a piece
// straight from the shard that holds it. Plans index HF tensors as flat row-major
// elements; a shard is a box of the tensor stored row-major on its own.
#pragma once

#include <cstdint>
#include <vector>

#include "layout/trainer.hpp"
#include "tensor/view.hpp"

namespace shardsync {

// A copy whose every loop moves the source by a fixed step in each tensor dimension with
// no wrap-around ("carry-free"): the source element of loop indices j is the row-major
// index of base + sum_m j_m * steps[m].
struct CoordCopy {
  CopyDesc flat;                            // the copy itself (source: flat tensor elements)
  std::vector<int64_t> base;                // coordinates of flat.src_offset
  std::vector<std::vector<int64_t>> steps;  // per loop of flat.dims, per tensor dimension
  // The smallest box holding every source element (exact: the walk has no wrap-around).
  Box bounds() const;
  // Iterations [from, from + count) of loop `loop`; a loop left with one iteration is dropped
  // (the innermost stays).
  CoordCopy slice(size_t loop, int64_t from, int64_t count) const;
};

// Splits a copy whose source indexes a row-major tensor of `shape` into carry-free parts:
// coalesced loops are factored back into one loop per tensor dimension where they divide
// evenly, and cut where they do not. The parts together are the copy, each element once.
std::vector<CoordCopy> to_coords(const CopyDesc& d, const std::vector<int64_t>& shape);

// The copy of a part whose bounds lie inside `box`, its source re-based to the box's own
// row-major storage; loops coalesced again where the box allows.
CopyDesc rebase_into(const CoordCopy& c, const Box& box);

}  // namespace shardsync
