// The unit of work of each engine and how a consumer's pulls are packed into chunks.
// Every rank derives the same schedule from the same plans and routes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/engine.hpp"

namespace shardsync {

// Tensors gathered, transferred and released together (the engine row's UnitKind).
struct Unit {
  std::vector<int32_t> tensors;
  int64_t bytes = 0;
};
std::vector<Unit> make_units(const ModelSpec& model, UnitKind kind, int64_t bucket_bytes);

// One pulled piece inside a packed chunk.
struct ChunkPiece {
  int32_t hf = 0;
  int32_t entry = 0;       // plan entry of the consumer's local rank
  int64_t slab_lo = 0;     // served slab starts at this element of the HF tensor
  CopyDesc copy;           // src: full HF tensor elements; dst: engine parameter elements
  int64_t buf_offset = 0;  // bytes from the chunk start
  int64_t bytes = 0;       // in the chunk (FP8 on the wire: codes and scales)
  // FP8 on the wire (make_chunks): the trainer quantizes the piece (a box of whole 128 x 128
  // blocks, copy in its two-loop form) into e4m3fn codes in the piece's order, followed at
  // fp8_scales_at(piece) by the fp32 scales of its blocks, dense. `scales` is the consumer's copy
  // of those into the parameter's weight_scale_inv (elements; set by the consumer's schedule).
  bool fp8 = false;
  CopyDesc scales;
};

// FP8 on the wire: for each HF tensor, the source a trainer quantizes pieces of (rows and
// columns of the gathered tensor, or of a trainer shard for direct pulls); rows 0: the tensor
// travels in its own dtype.
struct Fp8Source {
  int64_t rows = 0, cols = 0;
};
// A piece of an FP8 source as a box: rows [row0, row0 + rows), columns [col0, col0 + cols), the
// source's rows ld elements apart.
struct SourceBox {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0, ld = 0;
  int64_t scale_rows() const { return (rows + 127) / 128; }
  int64_t scale_cols() const { return (cols + 127) / 128; }
};
// The copy of a piece as one box of a row-major source of `src.cols` columns: a run of whole
// rows, a part of one row, or two loops (rows, then a contiguous run); nullopt otherwise
// (a transposing or 3-D copy).
std::optional<SourceBox> source_box(const CopyDesc& d, const Fp8Source& src);
// An FP8 piece's bytes (codes, 16-byte aligned, then scales), and where its scales start.
int64_t fp8_piece_bytes(const SourceBox& b);
int64_t fp8_scales_at(const ChunkPiece& p);
struct Chunk {
  int64_t bytes = 0;
  std::vector<ChunkPiece> pieces;
};

// Splits a copy into pieces of at most `max_elems` elements along its loops; a piece of
// several outer rows holds a multiple of kSplitRows of them where it can.
constexpr int64_t kSplitRows = 128;
std::vector<CopyDesc> split_copy(const CopyDesc& d, int64_t max_elems);
// Packs pulls (in order) into chunks of at most `chunk_bytes`; pieces 16-byte aligned. With
// `fp8` (indexed by HF tensor), pieces of tensors with an FP8 source go as codes and scales,
// split at multiples of 128 rows; throws InputError for a piece that is not whole 128 x 128
// blocks of its source, or a chunk too small for 128 of its rows.
std::vector<Chunk> make_chunks(const ModelSpec& model, const std::vector<ChunkPiece>& pulls, int64_t chunk_bytes,
                               const std::vector<Fp8Source>* fp8 = nullptr);

// A piece's two copies through its packed chunk: pack (HF tensor -> chunk at 0) and unpack
// (chunk at 0 -> engine parameter). The chunk holds the piece in the source's loop order: a
// transposing copy (Llama-4's expert weights) is packed as runs of source rows and
// transposed by the unpack, from the dense chunk.
CopyDesc pack_copy(const CopyDesc& d);
CopyDesc unpack_copy(const CopyDesc& d);
// The chunk layout's version, in the rejoin fingerprint: a replacement rank built for another
// layout is refused instead of unpacking garbage. 2: transposing pieces in the source's order;
// 3: FP8 pieces (codes, then scales).
constexpr int kChunkFormat = 3;

// REQUEST payloads: a consumer's pulls for one unit from one trainer.
std::vector<uint8_t> encode_pulls(const std::vector<ChunkPiece>& pulls);
std::vector<ChunkPiece> decode_pulls(const std::vector<uint8_t>& bytes, int32_t num_hf);

// For one local rank: per unit, per trainer, the pulls (in entry order).
struct RankSchedule {
  // pulls[unit] = list of (trainer rank, pulls)
  std::vector<std::vector<std::pair<int, std::vector<ChunkPiece>>>> pulls;
};
RankSchedule make_rank_schedule(const std::vector<Unit>& units, const std::vector<int32_t>& unit_of_hf,
                                const RankPlan& plan, const std::vector<Pull>& pulls);
std::vector<int32_t> unit_of_tensor(const std::vector<Unit>& units, size_t num_hf);

}  // namespace shardsync
