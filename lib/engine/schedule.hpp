// The unit of work of each engine and how a consumer's pulls are packed into chunks.
// Every rank derives the same schedule from the same plans and routes.
#pragma once

#include <cstdint>
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
  int64_t bytes = 0;
};
struct Chunk {
  int64_t bytes = 0;
  std::vector<ChunkPiece> pieces;
};

// Splits a copy into pieces of at most `max_elems` elements along its loops; a piece of
// several outer rows holds a multiple of kSplitRows of them where it can.
constexpr int64_t kSplitRows = 128;
std::vector<CopyDesc> split_copy(const CopyDesc& d, int64_t max_elems);
// Packs pulls (in order) into chunks of at most `chunk_bytes`; pieces 16-byte aligned.
std::vector<Chunk> make_chunks(const ModelSpec& model, const std::vector<ChunkPiece>& pulls, int64_t chunk_bytes);

// A piece's two copies through its packed chunk: pack (HF tensor -> chunk at 0) and unpack
// (chunk at 0 -> engine parameter). The chunk holds the piece in the source's loop order: a
// transposing copy (Llama-4's expert weights) is packed as runs of source rows and
// transposed by the unpack, from the dense chunk.
CopyDesc pack_copy(const CopyDesc& d);
CopyDesc unpack_copy(const CopyDesc& d);
// The chunk layout's version, in the rejoin fingerprint: a replacement rank built for another
// layout is refused instead of unpacking garbage. 2: transposing pieces in the source's order.
constexpr int kChunkFormat = 2;

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
