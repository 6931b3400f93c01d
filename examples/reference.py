"""An independent reference for the RL-step example: a model's HF weights built from its
config.json, a Megatron trainer rank's shards of them, and the parameters vLLM's loaders
build on an inference rank. It imports nothing from shardsync: the rules are restated here
from Megatron-LM's and vLLM's documented behaviour, so that a shardsync bug (a swapped k and
v, a wrong TP slice, an expert on the wrong rank) shows up as a mismatch.

Covers dense Qwen3 and Qwen3-MoE (model_type qwen3, qwen3_moe); trainer layouts tpN with
optional epM (experts whole per EP rank, etp1); inference layouts tpN or dpN,epN.
"""
import numpy as np


def parse_layout(spec):
    """'tp2,ep2' -> {'tp': 2, 'ep': 2, ...}: defaults 1, and etp = tp (Megatron's default expert
    tensor parallelism) unless given."""
    out = {"tp": 1, "pp": 1, "dp": 1, "ep": 1}
    for part in spec.split(","):
        key = part.rstrip("0123456789")
        if key not in list(out) + ["etp"] or key == part:
            raise ValueError(f"layout {spec!r}: {part!r} is not one of tpN, ppN, dpN, epN, etpN")
        out[key] = int(part[len(key):])
    out.setdefault("etp", out["tp"])
    return out


def is_moe_layer(cfg, layer):
    if cfg.get("model_type") != "qwen3_moe" or cfg.get("num_experts", 0) == 0:
        return False
    return layer not in cfg.get("mlp_only_layers", []) and (layer + 1) % cfg.get("decoder_sparse_step", 1) == 0


def hf_shapes(cfg):
    """{HF name: shape} of the checkpoint."""
    H, V, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": (V, H)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out.update({p + "input_layernorm.weight": (H,), p + "self_attn.q_proj.weight": (q, H),
                    p + "self_attn.k_proj.weight": (kv, H), p + "self_attn.v_proj.weight": (kv, H),
                    p + "self_attn.o_proj.weight": (H, q), p + "self_attn.q_norm.weight": (hd,),
                    p + "self_attn.k_norm.weight": (hd,), p + "post_attention_layernorm.weight": (H,)})
        if is_moe_layer(cfg, layer):
            E, Im = cfg["num_experts"], cfg["moe_intermediate_size"]
            out[p + "mlp.gate.weight"] = (E, H)
            for e in range(E):
                out.update({p + f"mlp.experts.{e}.gate_proj.weight": (Im, H), p + f"mlp.experts.{e}.up_proj.weight": (Im, H),
                            p + f"mlp.experts.{e}.down_proj.weight": (H, Im)})
        else:
            I = cfg["intermediate_size"]
            out.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I)})
    out["model.norm.weight"] = (H,)
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (V, H)
    return out


def to_bf16(x):
    """float32 -> bf16 bits (uint16), round to nearest even."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def initial_weights(cfg, seed):
    """{HF name: bf16 array}: norms near 1, matrices small, all from `seed`."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in hf_shapes(cfg).items():
        base = 1.0 if len(shape) == 1 else 0.0
        out[name] = to_bf16(base + 0.02 * rng.standard_normal(shape, dtype=np.float32))
    return out


def optimizer_step(weights, step, seed, lr=1e-2):
    """A deterministic stand-in for an optimizer step: w <- bf16(w - lr * g), g from (seed, step)."""
    rng = np.random.default_rng([seed, step])
    for name in sorted(weights):
        w = weights[name]
        g = rng.standard_normal(w.shape, dtype=np.float32)
        w[...] = to_bf16(from_bf16(w) - lr * g)


def expert_of(name):
    """(layer, expert) of an expert tensor's HF name, or None."""
    parts = name.split(".")
    if "experts" in parts:
        return int(parts[2]), int(parts[parts.index("experts") + 1])
    return None


def _split(n, parts, index):
    per = n // parts
    return slice(index * per, (index + 1) * per)


def megatron_shards(cfg, full, layout, rank):
    """{HF name: this trainer rank's shard} under Megatron-LM's rules: column-parallel
    (q, k, v, gate, up) split on dim 0 and row-parallel (o, down) on dim 1 over TP; the
    vocabulary padded to a multiple of 128 x TP and split on dim 0; norms and the router
    replicated. Experts: EP ranks hold contiguous blocks of experts, each split over ETP like
    the dense MLP. Dense ranks order tp fastest; expert ranks etp fastest, then ep (the
    expert groups fold over the same ranks as TP x DP)."""
    tp, ep, etp = layout["tp"], layout["ep"], layout["etp"]
    tp_rank, etp_rank, ep_rank = rank % tp, rank % etp, (rank // etp) % ep
    out = {}
    for name, w in full.items():
        ex = expert_of(name)
        if ex is not None:
            per = cfg["num_experts"] // ep
            if ex[1] // per != ep_rank:
                continue
            if name.endswith(("gate_proj.weight", "up_proj.weight")):
                out[name] = w[_split(w.shape[0], etp, etp_rank)].copy()
            else:
                out[name] = w[:, _split(w.shape[1], etp, etp_rank)].copy()
            continue
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            V = w.shape[0]
            padded = -(-V // (128 * tp)) * (128 * tp)
            per = padded // tp
            lo, hi = tp_rank * per, min((tp_rank + 1) * per, V)
            out[name] = w[lo:hi].copy()
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")):
            out[name] = w[_split(w.shape[0], tp, tp_rank)].copy()
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            out[name] = w[:, _split(w.shape[1], tp, tp_rank)].copy()
        else:
            out[name] = w.copy()
    return out


def vllm_params(cfg, full, layout, local_rank):
    """{vLLM parameter name: array} of one inference rank (its rank within a replica) as
    vLLM's loaders build them: QKVParallelLinear (q, k, v rows of this TP rank concatenated;
    KV heads replicated when fewer than TP), MergedColumnParallelLinear gate_up_proj,
    RowParallelLinear on dim 1, VocabParallelEmbedding (vocabulary padded to a multiple of
    64, split on dim 0, padding rows zero), FusedMoE w13_weight [E_local, 2 x I, H] and
    w2_weight [E_local, H, I] with experts by EP rank (EP over dp x tp ranks, experts whole)."""
    tp, dp, ep = layout["tp"], layout["dp"], layout["ep"]
    tp_rank = local_rank % tp
    ep_size = dp * tp if ep > 1 else 1
    ep_rank = local_rank if ep > 1 else 0
    hd, kv_heads = cfg["head_dim"], cfg["num_key_value_heads"]
    out = {}
    for name, w in full.items():
        if expert_of(name) is not None:
            continue
        p = name.rsplit(".", 2)[0]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            V, H = w.shape
            padded = -(-V // 64) * 64
            per = padded // tp
            part = np.zeros((per, H), dtype=np.uint16)
            lo, hi = tp_rank * per, min((tp_rank + 1) * per, V)
            if hi > lo:
                part[: hi - lo] = w[lo:hi]
            out[name] = part
        elif name.endswith("q_proj.weight"):
            k, v = full[p + ".k_proj.weight"], full[p + ".v_proj.weight"]
            if kv_heads >= tp:
                ks, vs = k[_split(k.shape[0], tp, tp_rank)], v[_split(v.shape[0], tp, tp_rank)]
            else:  # each KV head replicated over tp / kv_heads ranks
                head = tp_rank // (tp // kv_heads)
                ks, vs = k[head * hd:(head + 1) * hd], v[head * hd:(head + 1) * hd]
            out[p + ".qkv_proj.weight"] = np.concatenate([w[_split(w.shape[0], tp, tp_rank)], ks, vs])
        elif name.endswith(("k_proj.weight", "v_proj.weight", "up_proj.weight")):
            continue  # merged with q_proj / gate_proj
        elif name.endswith("gate_proj.weight"):
            up = full[p + ".up_proj.weight"]
            out[p + ".gate_up_proj.weight"] = np.concatenate([w[_split(w.shape[0], tp, tp_rank)],
                                                              up[_split(up.shape[0], tp, tp_rank)]])
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            out[name] = w[:, _split(w.shape[1], tp, tp_rank)]
        else:
            out[name] = w
    for layer in range(cfg["num_hidden_layers"]):
        if not is_moe_layer(cfg, layer):
            continue
        E = cfg["num_experts"]
        per = E // ep_size
        moe_tp = 1 if ep > 1 else tp
        mine = range(ep_rank * per, (ep_rank + 1) * per)
        p = f"model.layers.{layer}.mlp.experts."
        w13, w2 = [], []
        for e in mine:
            g, u, d = full[p + f"{e}.gate_proj.weight"], full[p + f"{e}.up_proj.weight"], full[p + f"{e}.down_proj.weight"]
            r = tp_rank if moe_tp > 1 else 0
            w13.append(np.concatenate([g[_split(g.shape[0], moe_tp, r)], u[_split(u.shape[0], moe_tp, r)]]))
            w2.append(d[:, _split(d.shape[1], moe_tp, r)])
        out[p + "w13_weight"] = np.stack(w13)
        out[p + "w2_weight"] = np.stack(w2)
    return out
