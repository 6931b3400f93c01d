// The CPU device's copy kernels: execute_copy (tensor/view.hpp) made fast, with streaming
// stores, prefetch, tiled 16-bit transposes in AVX2 or SSE2 registers, and copies of a batch
// that read the same source rows taken row by row together. execute_copy is the reference
// the tests hold these to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/view.hpp"

namespace shardsync {

// The same copy, fast (fast_copy.cpp): streaming stores for large copies, tiled transposes.
// The CPU device runs this one; tests hold it to execute_copy.
void execute_copy_fast(const CopyDesc& d, const void* src, void* dst, int64_t elem_bytes);
// One copy of a batch for execute_copies_fast.
struct CopyTask {
  const CopyDesc* desc = nullptr;
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t elem_bytes = 1;
};
// A batch of independent copies (none reads or writes what another writes), fast. Copies
// that take different columns of the same source rows, as a trainer packing one tensor for
// each of its TP consumers does, go row by row together: each source row is read once, in
// order, instead of once per consumer with a stride (fast_copy.cpp has the numbers). The
// rest go one by one through execute_copy_fast. Returns how many copies went together.
int64_t execute_copies_fast(const std::vector<CopyTask>& batch);
// How execute_copy_fast transposes 16-bit elements, e.g. "avx2, 32x64 tiles" (benchmarks
// report it). fast_copy_allow_avx2(false) falls back to the SSE2 registers;
// fast_copy_set_tile_width(64 or 128; 0 for the default, 64) sets the tile. Both return
// the previous setting (tests try every combination).
std::string fast_copy_transpose_kernel();
bool fast_copy_allow_avx2(bool allowed);
int fast_copy_set_tile_width(int width);

}  // namespace shardsync
