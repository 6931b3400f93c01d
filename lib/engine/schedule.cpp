#include "engine/schedule.hpp"

#include <algorithm>
#include <cstring>

#include "common/bytes.hpp"
#include "common/error.hpp"

namespace shardsync {

std::vector<Unit> make_units(const ModelSpec& model, UnitKind kind, int64_t bucket_bytes) {
  std::vector<Unit> units;
  const auto& params = model.params();
  switch (kind) {
    case UnitKind::kTensor:
      for (int32_t i = 0; i < int32_t(params.size()); ++i) units.push_back(Unit{{i}, params[size_t(i)].bytes()});
      break;
    case UnitKind::kWeightGroup:
      for (const WeightGroup& g : model.groups()) {
        Unit u;
        for (int32_t i = g.first_param; i < g.first_param + g.num_params; ++i) u.tensors.push_back(i);
        u.bytes = g.bytes;
        if (!u.tensors.empty()) units.push_back(std::move(u));
      }
      break;
    case UnitKind::kBucket: {
      Unit u;
      for (int32_t i = 0; i < int32_t(params.size()); ++i) {
        int64_t b = params[size_t(i)].bytes();
        if (!u.tensors.empty() && u.bytes + b > bucket_bytes) {
          units.push_back(std::move(u));
          u = Unit{};
        }
        u.tensors.push_back(i);
        u.bytes += b;
      }
      if (!u.tensors.empty()) units.push_back(std::move(u));
      break;
    }
  }
  return units;
}

std::vector<int32_t> unit_of_tensor(const std::vector<Unit>& units, size_t num_hf) {
  std::vector<int32_t> out(num_hf, -1);
  for (int32_t u = 0; u < int32_t(units.size()); ++u)
    for (int32_t t : units[size_t(u)].tensors) out[size_t(t)] = u;
  return out;
}

namespace {
// Iterations [from, from + n) of a copy's outer loop.
CopyDesc outer_rows(const CopyDesc& d, int64_t from, int64_t n) {
  CopyDesc p = d;
  const CopyDim& outer = d.dims.front();
  p.src_offset += from * outer.src_stride;
  p.dst_offset += from * outer.dst_stride;
  p.dims.front().size = n;
  p.numel = d.numel / outer.size * n;
  return p;
}
}  // namespace

std::vector<CopyDesc> split_copy(const CopyDesc& d, int64_t max_elems) {
  if (d.numel <= max_elems) return {d};
  std::vector<CopyDesc> out;
  const CopyDim outer = d.dims.front();
  if (d.dims.size() == 1) {
    for (int64_t i = 0; i < outer.size; i += max_elems) out.push_back(outer_rows(d, i, std::min(max_elems, outer.size - i)));
    return out;
  }
  int64_t inner = d.numel / outer.size;
  if (inner > max_elems) {
    CopyDesc in = d;
    in.dims.erase(in.dims.begin());
    in.numel = inner;
    for (int64_t i = 0; i < outer.size; ++i) {
      CopyDesc slice = in;
      slice.src_offset += i * outer.src_stride;
      slice.dst_offset += i * outer.dst_stride;
      for (auto& p : split_copy(slice, max_elems)) out.push_back(std::move(p));
    }
    return out;
  }
  int64_t per = std::max<int64_t>(1, max_elems / inner);
  // Whole multiples of 128 outer rows where a piece holds that many: a transposing piece then
  // keeps whole tiles and 64-byte-aligned runs of source rows (Llama-4 gate_up at 4 MiB
  // chunks: 409 columns a piece before, 384 now; 49-56% -> 59-65% of memcpy on the dev VM,
  // measured when the pack transposed).
  if (per >= kSplitRows) per = per / kSplitRows * kSplitRows;
  for (int64_t i = 0; i < outer.size; i += per) out.push_back(outer_rows(d, i, std::min(per, outer.size - i)));
  return out;
}

namespace {
int64_t align16(int64_t x) { return (x + 15) & ~int64_t(15); }
}  // namespace

std::optional<SourceBox> source_box(const CopyDesc& d, const Fp8Source& src) {
  if (src.cols <= 0 || d.numel <= 0) return std::nullopt;
  SourceBox b;
  b.ld = src.cols;
  b.row0 = d.src_offset / src.cols;
  b.col0 = d.src_offset % src.cols;
  if (d.dims.size() == 1) {
    if (d.dims[0].src_stride != 1 || d.dims[0].dst_stride != 1) return std::nullopt;
    if (b.col0 == 0 && d.numel % src.cols == 0) {
      b.rows = d.numel / src.cols;
      b.cols = src.cols;
    } else if (b.col0 + d.numel <= src.cols) {
      b.rows = 1;
      b.cols = d.numel;
    } else {
      return std::nullopt;
    }
    return b;
  }
  if (d.dims.size() != 2 || d.dims[1].src_stride != 1 || d.dims[1].dst_stride != 1 ||
      d.dims[0].src_stride != src.cols || b.col0 + d.dims[1].size > src.cols)
    return std::nullopt;
  b.rows = d.dims[0].size;
  b.cols = d.dims[1].size;
  return b;
}

int64_t fp8_piece_bytes(const SourceBox& b) { return align16(b.rows * b.cols) + 4 * b.scale_rows() * b.scale_cols(); }
int64_t fp8_scales_at(const ChunkPiece& p) { return align16(p.copy.numel); }

namespace {
// An FP8 piece in its two-loop form (rows, then a run; dst rows as the copy steps them), or
// the reason it cannot travel as codes and scales.
CopyDesc fp8_rows_form(const ModelSpec& model, const ChunkPiece& p, const Fp8Source& src, SourceBox* box) {
  const std::string& name = model.param(p.hf).name;
  std::optional<SourceBox> b = source_box(p.copy, src);
  if (!b)
    throw InputError("--wire fp8", name, "a piece of it is not a box of rows and columns of its source (a "
                     "transposing or strided copy); use --wire bf16");
  auto whole = [&](int64_t lo, int64_t n, int64_t extent, const char* dim) {
    if (lo % 128 == 0 && ((lo + n) % 128 == 0 || lo + n == extent)) return;
    throw InputError("--wire fp8", name,
                     std::string("a piece of it covers ") + dim + " [" + std::to_string(lo) + ", " +
                         std::to_string(lo + n) + ") of " + std::to_string(extent) +
                         ": not whole 128 x 128 blocks, so its scales would not be the HF tensor's; choose "
                         "layouts whose shards are whole blocks, or --wire bf16");
  };
  whole(b->row0, b->rows, src.rows, "rows");
  whole(b->col0, b->cols, src.cols, "columns");
  *box = *b;
  CopyDesc c = p.copy;
  if (c.dims.size() == 1) c.dims = {CopyDim{b->rows, src.cols, b->cols}, CopyDim{b->cols, 1, 1}};  // contiguous both sides
  return c;
}
}  // namespace

std::vector<Chunk> make_chunks(const ModelSpec& model, const std::vector<ChunkPiece>& pulls, int64_t chunk_bytes,
                               const std::vector<Fp8Source>* fp8) {
  std::vector<Chunk> chunks;
  Chunk cur;
  auto flush = [&] {
    if (!cur.pieces.empty()) chunks.push_back(std::move(cur));
    cur = Chunk{};
  };
  auto add = [&](ChunkPiece piece, int64_t bytes) {
    if (cur.bytes > 0 && align16(cur.bytes) + bytes > chunk_bytes) flush();
    piece.buf_offset = align16(cur.bytes);
    piece.bytes = bytes;
    cur.bytes = piece.buf_offset + bytes;
    cur.pieces.push_back(std::move(piece));
  };
  for (const ChunkPiece& p : pulls) {
    const Fp8Source src = fp8 && size_t(p.hf) < fp8->size() ? (*fp8)[size_t(p.hf)] : Fp8Source{};
    if (src.rows > 0) {
      // Codes and scales: pieces of whole 128-row blocks, as many block rows as fit a chunk.
      SourceBox box;
      const CopyDesc rows = fp8_rows_form(model, p, src, &box);
      const int64_t step = std::max<int64_t>(1, (chunk_bytes - 15) / (128 * box.cols + 4 * box.scale_cols())) * 128;
      for (int64_t r = 0; r < box.rows; r += step) {
        ChunkPiece piece = p;
        piece.fp8 = true;
        const int64_t n = std::min(step, box.rows - r);
        piece.copy = rows;
        piece.copy.src_offset += r * rows.dims[0].src_stride;
        piece.copy.dst_offset += r * rows.dims[0].dst_stride;
        piece.copy.dims[0].size = n;
        piece.copy.numel = n * box.cols;
        SourceBox part = box;
        part.row0 += r;
        part.rows = n;
        if (fp8_piece_bytes(part) > chunk_bytes)
          throw InputError("--chunk", std::to_string(chunk_bytes),
                           "FP8 on the wire sends whole 128-row blocks: " + std::to_string(n) + " rows of " +
                               model.param(p.hf).name + " are " + std::to_string(fp8_piece_bytes(part)) +
                               " bytes of codes and scales; give a larger --chunk");
        add(std::move(piece), fp8_piece_bytes(part));
      }
      continue;
    }
    int64_t eb = dtype_bytes(model.param(p.hf).dtype);
    for (const CopyDesc& part : split_copy(p.copy, std::max<int64_t>(1, chunk_bytes / eb))) {
      ChunkPiece piece = p;
      piece.copy = part;
      add(std::move(piece), part.numel * eb);
    }
  }
  flush();
  return chunks;
}

namespace {
CopyDesc with_contiguous(const CopyDesc& d, bool src) {
  CopyDesc c = d;
  int64_t stride = 1;
  for (size_t k = c.dims.size(); k-- > 0;) {
    (src ? c.dims[k].src_stride : c.dims[k].dst_stride) = stride;
    stride *= c.dims[k].size;
  }
  (src ? c.src_offset : c.dst_offset) = 0;
  return c;
}

void swap_inner(CopyDesc& d) { std::swap(d.dims[d.dims.size() - 2], d.dims.back()); }
}  // namespace

CopyDesc pack_copy(const CopyDesc& d) {
  if (!copy_transposes(d)) return with_contiguous(d, false);
  CopyDesc c = d;
  swap_inner(c);  // source order: runs of source rows
  return with_contiguous(c, false);
}

CopyDesc unpack_copy(const CopyDesc& d) {
  if (!copy_transposes(d)) return with_contiguous(d, true);
  CopyDesc c = d;
  swap_inner(c);
  c = with_contiguous(c, true);  // the chunk in source order, as pack_copy wrote it
  swap_inner(c);                 // walked in the destination's order: a transpose
  return c;
}

namespace {
template <class T>
void put(std::vector<uint8_t>& b, T v) {
  put_bytes(b, v);
}
template <class T>
T take(const std::vector<uint8_t>& b, size_t& pos) {
  return take_bytes<T>(b, pos, "truncated pull request payload");
}
}  // namespace

std::vector<uint8_t> encode_pulls(const std::vector<ChunkPiece>& pulls) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, uint32_t(pulls.size()));
  for (const ChunkPiece& p : pulls) {
    put<int32_t>(b, p.hf);
    put<int32_t>(b, p.entry);
    put<int64_t>(b, p.slab_lo);
    put<int64_t>(b, p.copy.src_offset);
    put<int64_t>(b, p.copy.dst_offset);
    put<int64_t>(b, p.copy.numel);
    put<uint32_t>(b, uint32_t(p.copy.dims.size()));
    for (const CopyDim& d : p.copy.dims) {
      put<int64_t>(b, d.size);
      put<int64_t>(b, d.src_stride);
      put<int64_t>(b, d.dst_stride);
    }
  }
  return b;
}

std::vector<ChunkPiece> decode_pulls(const std::vector<uint8_t>& b, int32_t num_hf) {
  size_t pos = 0;
  uint32_t n = take<uint32_t>(b, pos);
  std::vector<ChunkPiece> out;
  for (uint32_t i = 0; i < n; ++i) {
    ChunkPiece p;
    p.hf = take<int32_t>(b, pos);
    p.entry = take<int32_t>(b, pos);
    p.slab_lo = take<int64_t>(b, pos);
    p.copy.src_offset = take<int64_t>(b, pos);
    p.copy.dst_offset = take<int64_t>(b, pos);
    p.copy.numel = take<int64_t>(b, pos);
    uint32_t nd = take<uint32_t>(b, pos);
    if (p.hf < 0 || p.hf >= num_hf || nd == 0 || nd > 16) throw Error("malformed pull request payload");
    for (uint32_t k = 0; k < nd; ++k) {
      CopyDim d;
      d.size = take<int64_t>(b, pos);
      d.src_stride = take<int64_t>(b, pos);
      d.dst_stride = take<int64_t>(b, pos);
      p.copy.dims.push_back(d);
    }
    out.push_back(std::move(p));
  }
  return out;
}

RankSchedule make_rank_schedule(const std::vector<Unit>& units, const std::vector<int32_t>& unit_of_hf,
                                const RankPlan& plan, const std::vector<Pull>& pulls) {
  RankSchedule s;
  s.pulls.resize(units.size());
  for (const Pull& pull : pulls) {
    const PlanEntry& e = plan.entries[size_t(pull.entry)];
    int32_t u = unit_of_hf[size_t(e.hf_param)];
    auto& list = s.pulls[size_t(u)];
    auto it = std::find_if(list.begin(), list.end(), [&](const auto& x) { return x.first == pull.trainer_rank; });
    if (it == list.end()) {
      list.emplace_back(pull.trainer_rank, std::vector<ChunkPiece>{});
      it = list.end() - 1;
    }
    it->second.push_back(ChunkPiece{e.hf_param, pull.entry, pull.slab_lo, pull.copy, 0, 0, false, {}});
  }
  for (auto& list : s.pulls)
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return s;
}

}  // namespace shardsync
