// The recordable view ops (the allowlist): what a plan's op chain is made of.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/view.hpp"

namespace shardsync {

enum class OpKind : uint8_t {
  kNarrow = 1,    // (dim, start, length)
  kSelect,        // (dim, index)
  kView,          // (shape...)
  kReshape,       // (shape...)
  kTranspose,     // (dim0, dim1)
  kPermute,       // (order...)
  kFlatten,       // (start_dim, end_dim)
  kUnsqueeze,     // (dim)
  kSqueeze,       // (dim)
  kChunk,         // (chunks, dim, index): piece `index` of tensor.chunk(chunks, dim)
  kSplit,         // (split_size, dim, index): piece `index` of tensor.split(split_size, dim)
  kContiguous,    // ()
  kIndexRange,    // (dim, start, length): index_select with consecutive indices
};
inline constexpr int kMaxOpArgs = 8;
inline constexpr uint8_t kMaxOpKind = uint8_t(OpKind::kIndexRange);

const char* op_name(OpKind k);
std::string recordable_ops();  // "narrow, select, view, ..." for error messages

struct Op {
  OpKind kind = OpKind::kContiguous;
  std::vector<int64_t> args;
  bool operator==(const Op&) const = default;
};

std::string format_op(const Op& op);  // "narrow(0, 1024, 1024)"
// Applies an op to the view algebra; throws ViewError on invalid arguments.
void apply_op(SubView& v, const Op& op);
// torch.chunk / torch.split piece bounds along a dimension of size n.
void chunk_bounds(int64_t n, int64_t chunks, int64_t index, int64_t* start, int64_t* length);
void split_bounds(int64_t n, int64_t split_size, int64_t index, int64_t* start, int64_t* length);

}  // namespace shardsync
