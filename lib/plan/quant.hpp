// FP8 inference targets (issue 20): which of a rank's engine parameters a block-FP8 target
// quantizes, the shape of each one's weight_scale_inv, and where each HF tensor's piece of a
// parameter lies in it and in its scales.
//
// The rule (docs/fp8.md, from vLLM's block-FP8 linear and MoE methods and the
// modules_to_not_convert of the FP8 checkpoints of DeepSeek-V3 / Kimi K2 / Qwen3): the linear
// weights of attention (merged QKV, o_proj; MLA's fused_qkv_a, q_b, kv_b), of the dense MLP
// (gate_up, down), of shared experts and of routed experts (FusedMoE w13, w2) become
// float8_e4m3fn of the same shape with an fp32 weight_scale_inv per 128 x 128 block;
// embeddings, lm_head, norms, the router and every bias stay as they are.
//
// The bf16 values a rank loads are quantized piece by piece: each piece is one HF tensor's
// part of the parameter (q, k and v of a merged QKV; gate and up; w1 and w3 of one expert),
// starting at a block boundary of that HF tensor, so its blocks are the HF tensor's own blocks
// and every rank and replica gets the bits a quantization of the whole HF tensor would give.
// Where a TP shard would cut a block, check_quant_target refuses, as vLLM's
// validate_fp8_block_shape does, naming the tensor, the dimension and the sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/inference.hpp"
#include "layout/trainer.hpp"
#include "model/catalog.hpp"
#include "plan/engine_params.hpp"

namespace shardsync {

// Whether a block-FP8 target quantizes parameters of this slot.
bool fp8_quantized(Slot s);
// The same rule on HF tensors: those that quantized slots load (never a bias). What FP8 on the
// wire sends as codes and scales (Quant.RulesOnSlotsAndHfTensorsAgree holds the two together).
bool fp8_quantized_hf(const ParamMeta& p);
// Bytes on the wire of n elements of a quantized HF tensor: n e4m3fn codes and the fp32 scales
// of the n / 16,384 blocks they fill (a tensor's partial edge blocks are not counted: under
// 0.1% of the scales of any real weight).
inline int64_t fp8_wire_bytes(int64_t n) { return n + 4 * ((n + 16383) / 16384); }

// One HF tensor's piece of a quantized parameter, seen as `matrices` of [N, K] (the leading
// dimensions flattened: a FusedMoE parameter [E, N, K] has E, a linear weight 1): rows
// [row0, row0 + rows) of matrix `matrix`, all K columns; its scales start at scale_row0 of that
// matrix's [ceil(N / 128)-ish, ceil(K / 128)] block of weight_scale_inv.
struct QuantRegion {
  int64_t matrix = 0;
  int64_t row0 = 0, rows = 0;
  int64_t scale_row0 = 0;
  std::string part;  // the HF tensor's role: "q_proj", "gate_proj", "w1", ... ("" when whole)
};

struct QuantParam {
  int32_t param = -1;               // index into the rank's engine parameters
  std::string scale_name;           // "...qkv_proj.weight_scale_inv", "...experts.w13_weight_scale_inv"
  std::vector<int64_t> scale_shape;  // fp32
  int64_t rows = 0, cols = 0;       // N and K of each matrix
  int64_t matrices = 1;
  std::vector<QuantRegion> regions;  // in row order, covering every row of every matrix

  int64_t scale_numel() const;
  int64_t scale_rows() const { return scale_shape[scale_shape.size() - 2]; }  // per matrix
  int64_t scale_cols() const { return scale_shape.back(); }
};

// The quantized parameters among one rank's engine parameters (empty unless the layout asks
// for a quantized target). Throws InputError, as check_quant_target, where a shard cuts a block.
std::vector<QuantParam> quant_params(const ModelSpec& model, const InferencePlacement& inf,
                                     const std::vector<EngineParam>& params);

// Every rank of a replica: throws InputError naming the first parameter whose TP shard cuts a
// 128 x 128 block (the FP8 block shape vLLM requires).
void check_quant_target(const ModelSpec& model, const InferencePlacement& inf);

// FP8 on the wire (--wire fp8): trainers quantize each piece of a quantized HF tensor and
// send its codes and scales. A piece's blocks must be the HF tensor's own, so every quantized
// HF tensor must be a 2-D weight (not Llama 4's fused 3-D experts) and every trainer shard of
// it whole 128 x 128 blocks (starting at a multiple of 128 in both dimensions, ending at one or
// at the tensor's end). Throws InputError naming the first tensor, dimension and shard that do
// not, or when the target is not FP8.
void check_fp8_wire(const ModelSpec& model, const TrainerPlacement& trainer, const InferencePlacement& inf);

}  // namespace shardsync
