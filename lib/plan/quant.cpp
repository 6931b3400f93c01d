#include "plan/quant.hpp"

#include "common/error.hpp"
#include "device/fp8.hpp"  // kFp8Block

namespace shardsync {

namespace {

int64_t blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

std::string scale_name_of(const std::string& weight) {
  const std::string w = "weight";
  if (weight.size() >= w.size() && weight.compare(weight.size() - w.size(), w.size(), w) == 0)
    return weight + "_scale_inv";  // "...proj.weight" -> "...proj.weight_scale_inv", "w13_weight" likewise
  throw Error("quant: parameter " + weight + " is not a weight");
}

// vLLM's own message for a shard that cuts a block, quoted after shardsync's.
std::string vllm_says(const std::string& what, int64_t n, const char* block) {
  return " (vLLM refuses it too: \"" + what + " = " + std::to_string(n) + " is not divisible by weight quantization " +
         block + " = 128.\")";
}

[[noreturn]] void refuse(const EngineParam& p, const std::string& dim, int64_t n, const std::string& how,
                         const std::string& vllm) {
  throw InputError("--quant fp8-block128", p.name,
                   dim + " = " + std::to_string(n) + " per rank (" + how + ") is not a multiple of the FP8 block, "
                   "128: a 128 x 128 scale block would span two ranks' shards" + vllm +
                   "; choose a layout whose shards are whole blocks, or --quant none");
}

struct Part {
  const char* name;
  int64_t rows;
};

}  // namespace

bool fp8_quantized(Slot s) {
  switch (s) {
    case Slot::kQKV: case Slot::kO: case Slot::kGateUp: case Slot::kDown: case Slot::kW13: case Slot::kW2:
    case Slot::kSharedGateUp: case Slot::kSharedDown: case Slot::kFusedQkvA: case Slot::kQB: case Slot::kKvB:
    case Slot::kQ: case Slot::kKvA:
      return true;
    default:
      return false;
  }
}

bool fp8_quantized_hf(const ParamMeta& p) {
  if (p.is_bias) return false;
  switch (p.kind) {
    case TensorKind::kQProj: case TensorKind::kKProj: case TensorKind::kVProj: case TensorKind::kOProj:
    case TensorKind::kGateProj: case TensorKind::kUpProj: case TensorKind::kDownProj:
    case TensorKind::kExpertGate: case TensorKind::kExpertUp: case TensorKind::kExpertDown:
    case TensorKind::kSharedGate: case TensorKind::kSharedUp: case TensorKind::kSharedDown:
    case TensorKind::kMlaQA: case TensorKind::kMlaQB: case TensorKind::kMlaKvA: case TensorKind::kMlaKvB:
    case TensorKind::kMlaQ:
    case TensorKind::kFusedExpertsGateUp: case TensorKind::kFusedExpertsDown:
      return true;
    default:
      return false;
  }
}

int64_t QuantParam::scale_numel() const {
  int64_t n = 1;
  for (int64_t s : scale_shape) n *= s;
  return n;
}

std::vector<QuantParam> quant_params(const ModelSpec& model, const InferencePlacement& inf,
                                     const std::vector<EngineParam>& params) {
  std::vector<QuantParam> out;
  if (inf.layout().quant == Quant::kNone) return out;
  const ModelConfig& c = model.config();
  if (c.arch == Arch::kGptOss)
    throw InputError("--quant fp8-block128", c.architecture,
                     "not modelled: vLLM serves gpt-oss in bf16 or MXFP4, and its FP8 layout of the interleaved "
                     "w13 and the expert biases is not one shardsync reproduces; use --quant none");
  const int64_t T = inf.layout().tp, moe_tp = inf.ep() ? 1 : inf.moe_size();
  for (int32_t i = 0; i < int32_t(params.size()); ++i) {
    const EngineParam& p = params[size_t(i)];
    if (!fp8_quantized(p.slot)) continue;
    if (p.dtype != DType::kBF16)
      throw InputError("--quant fp8-block128", p.name,
                       std::string("block FP8 quantizes bf16 weights; this one is ") + dtype_name(p.dtype));
    QuantParam q;
    q.param = i;
    q.scale_name = scale_name_of(p.name);
    q.rows = p.shape[p.shape.size() - 2];
    q.cols = p.shape.back();
    q.matrices = p.shape.size() == 3 ? p.shape[0] : 1;
    std::vector<Part> parts;  // one matrix's pieces, in row order
    bool merged = false, split = T > 1;
    switch (p.slot) {
      case Slot::kQKV: {
        const int64_t q_rows = c.num_heads / T * c.head_dim, kv_rows = inf.kv_heads_per_rank() * c.head_dim;
        parts = {{"q_proj", q_rows}, {"k_proj", kv_rows}, {"v_proj", kv_rows}};
        merged = true;
        break;
      }
      case Slot::kGateUp: case Slot::kSharedGateUp:
        parts = {{"gate_proj", q.rows / 2}, {"up_proj", q.rows / 2}};
        merged = true;
        break;
      case Slot::kFusedQkvA:
        parts = {{"q_a_proj", p.output_sizes.at(0)}, {"kv_a_proj_with_mqa", p.output_sizes.at(1)}};
        merged = true;
        split = !p.disable_tp && T > 1;
        break;
      case Slot::kW13:
        parts = {{"w1", q.rows / 2}, {"w3", q.rows / 2}};
        break;
      default:
        parts = {{"", q.rows}};
    }
    // vLLM's validate_fp8_block_shape (linear layers) and Fp8MoEMethod.create_weights.
    if (p.slot == Slot::kW13 && q.rows / 2 % kFp8Block != 0)
      refuse(p, "dim 1 (gate_proj and up_proj rows of each expert)", q.rows / 2,
             "moe_intermediate_size " + std::to_string(c.moe_intermediate) + " / MoE-TP " + std::to_string(moe_tp),
             vllm_says("The output_size of gate's and up's weight", q.rows / 2, "block_n"));
    if (p.slot == Slot::kW2 && moe_tp > 1 && q.cols % kFp8Block != 0)
      refuse(p, "dim 2 (down_proj input of each expert)", q.cols,
             "moe_intermediate_size " + std::to_string(c.moe_intermediate) + " / MoE-TP " + std::to_string(moe_tp),
             vllm_says("The input_size of down's weight", q.cols, "block_k"));
    if (p.loader == LoaderKind::kRow && T > 1 && q.cols % kFp8Block != 0)
      refuse(p, "dim 1 (input columns)", q.cols, "row-parallel over TP " + std::to_string(T),
             vllm_says("Weight input_size_per_partition", q.cols, "block_k"));
    if (p.loader == LoaderKind::kColumn && T > 1 && q.rows % kFp8Block != 0)
      refuse(p, "dim 0 (output rows)", q.rows, "column-parallel over TP " + std::to_string(T),
             vllm_says("Weight output_partition_size", q.rows, "block_n"));
    if (merged)
      for (size_t k = 0; k < parts.size(); ++k) {
        const bool exempt = !split && k + 1 == parts.size();  // the last shard of a layer TP does not split
        if (!exempt && parts[k].rows % kFp8Block != 0)
          refuse(p, std::string("dim 0, its ") + parts[k].name + " rows", parts[k].rows,
                 split ? "split over TP " + std::to_string(T) : "a merged layer's shard before the last",
                 vllm_says("Weight output_partition_size", parts[k].rows, "block_n"));
      }
    int64_t scale_rows = 0;
    for (int64_t e = 0; e < q.matrices; ++e) {
      int64_t row = 0, scale_row = 0;
      for (const Part& part : parts) {
        q.regions.push_back(QuantRegion{e, row, part.rows, scale_row, part.name});
        row += part.rows;
        scale_row += blocks(part.rows);
      }
      scale_rows = scale_row;
    }
    q.scale_shape = {scale_rows, blocks(q.cols)};
    if (p.shape.size() == 3) q.scale_shape.insert(q.scale_shape.begin(), q.matrices);
    out.push_back(std::move(q));
  }
  return out;
}

void check_quant_target(const ModelSpec& model, const InferencePlacement& inf) {
  if (inf.layout().quant == Quant::kNone) return;
  for (int r = 0; r < inf.layout().ranks_per_replica(); ++r)
    quant_params(model, inf, EngineParams(model, inf, r).params());
}

void check_fp8_wire(const ModelSpec& model, const TrainerPlacement& trainer, const InferencePlacement& inf) {
  if (inf.layout().quant != Quant::kFp8Block128)
    throw InputError("--wire", "fp8", "FP8 on the wire needs an FP8 target: add --quant fp8-block128");
  for (int32_t i = 0; i < int32_t(model.params().size()); ++i) {
    const ParamMeta& p = model.param(i);
    if (!fp8_quantized_hf(p)) continue;
    if (p.shape.size() != 2)
      throw InputError("--wire fp8", p.name,
                       std::to_string(p.shape.size()) + "-D: FP8 on the wire quantizes 2-D weights in 128 x 128 blocks "
                       "(Llama 4's fused experts are not); use --wire bf16 (inference ranks quantize)");
    for (const TrainerPlacement::Piece& piece : trainer.pieces(i))
      for (int d = 0; d < 2; ++d) {
        const int64_t lo = piece.box.start[size_t(d)], hi = lo + piece.box.length[size_t(d)];
        if (lo % kFp8Block == 0 && (hi % kFp8Block == 0 || hi == p.shape[size_t(d)])) continue;
        throw InputError("--wire fp8", p.name,
                         "the trainer shard of rank " + std::to_string(piece.ranks.front()) + " holds dim " +
                             std::to_string(d) + " [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of " +
                             std::to_string(p.shape[size_t(d)]) +
                             ": not whole 128 x 128 blocks, so its scales would not be the HF tensor's; choose a "
                             "trainer layout whose shards are whole blocks, or --wire bf16");
      }
  }
}

}  // namespace shardsync
