#!/usr/bin/env python3
"""Times syncs through shardsync's Python API on torch CUDA tensors, every sync verified.

Ranks 0..T-1 are trainer ranks (tp1: each holds every HF tensor, one torch.empty per tensor),
the rest one inference replica (--inference-tp N, vLLM's merged parameters, one torch.empty
per parameter). Per version the trainer fills every tensor with random bits seeded by
(tensor, version) (any bf16 pattern); the sync's time runs from a barrier after the fill to
the last rank's return from publish/pull (CUDA synchronized), the slowest rank's. Then each
inference rank regenerates the tensors it needs and builds its expected parameters by vLLM's
rules (q/k/v and gate/up concatenated, TP slices on dim 0 or 1, KV heads replicated below
TP, the vocabulary padded to 64 and split), and compares int16 bits; mismatches go to wrong.

  mpirun -np 2 python3 bench/library_bench.py --config configs/models/qwen3-8b.json --inference-tp 1 --syncs 20
  --in-slots: the tensors live in the library's slots (zero copy) instead of torch.empty ones (staged).

Prints one line per sync and a summary line (median, min, max, wrong), and writes --json.
Needs PyTorch, mpi4py and a GPU; the model must be dense Qwen3/Llama-like (q/k/v, gate/up).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from mpi4py import MPI

import shardsync


def shapes(cfg):
    H, V, hd = cfg["hidden_size"], cfg["vocab_size"], cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    q, kv, I = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"]
    out = {"model.embed_tokens.weight": (V, H)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out.update({p + "input_layernorm.weight": (H,), p + "self_attn.q_proj.weight": (q, H), p + "self_attn.k_proj.weight": (kv, H),
                    p + "self_attn.v_proj.weight": (kv, H), p + "self_attn.o_proj.weight": (H, q), p + "post_attention_layernorm.weight": (H,),
                    p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I)})
        if cfg.get("model_type") == "qwen3":
            out.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
    out["model.norm.weight"] = (H,)
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (V, H)
    return out


def generate(name, shape, version, index):
    g = torch.Generator(device="cuda").manual_seed(index * 1_000_003 + version)
    return torch.randint(-32768, 32767, shape, dtype=torch.int16, device="cuda", generator=g)


def expected(cfg, hf, order, name, version, tp, r):
    """The int16 bits of engine parameter `name` on TP rank r, built from the HF tensors."""
    def full(n):
        return generate(n, hf[n], version, order[n])

    def rows(t, parts, i):
        per = t.shape[0] // parts
        return t[i * per:(i + 1) * per]
    hd, kvh = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]), cfg["num_key_value_heads"]
    if name.endswith("qkv_proj.weight"):
        p = name[: -len("qkv_proj.weight")]
        k, v = full(p + "k_proj.weight"), full(p + "v_proj.weight")
        if kvh >= tp:
            k, v = rows(k, tp, r), rows(v, tp, r)
        else:
            h = r // (tp // kvh)
            k, v = k[h * hd:(h + 1) * hd], v[h * hd:(h + 1) * hd]
        return torch.cat([rows(full(p + "q_proj.weight"), tp, r), k, v])
    if name.endswith("gate_up_proj.weight"):
        p = name[: -len("gate_up_proj.weight")]
        return torch.cat([rows(full(p + "gate_proj.weight"), tp, r), rows(full(p + "up_proj.weight"), tp, r)])
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        w = full(name)
        per = w.shape[1] // tp
        return w[:, r * per:(r + 1) * per]
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        w = full(name)
        V = w.shape[0]
        per = (-(-V // 64) * 64) // tp
        out = torch.zeros((per, w.shape[1]), dtype=torch.int16, device="cuda")
        lo, hi = r * per, min((r + 1) * per, V)
        if hi > lo:
            out[: hi - lo] = w[lo:hi]
        return out
    return full(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/models/qwen3-8b.json")
    ap.add_argument("--model", help="the name shardsync knows it by (default: the config's path)")
    ap.add_argument("--inference-tp", type=int, default=1)
    ap.add_argument("--engine", default="v4")
    ap.add_argument("--syncs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--in-slots", action="store_true")
    ap.add_argument("--checksum", action="store_true", help="the library checksums every piece (receivers' hashing time reported)")
    ap.add_argument("--json")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    cfg = json.load(open(a.config))
    hf = shapes(cfg)
    order = {n: i for i, n in enumerate(hf)}
    torch.cuda.set_device(0)
    s = shardsync.Session(comm, model=a.model or a.config, trainer="tp1", inference=f"tp{a.inference_tp}", engine=a.engine,
                          memory="cuda", gpu=0, checksum=a.checksum)
    mine = {}
    for name, info in s.tensors().items():
        mine[name] = s.slot(name) if a.in_slots else torch.empty(info.shape, dtype=torch.bfloat16, device="cuda")
        s.bind(name, mine[name])
    times, wrong, rows = [], 0, []
    for k in range(a.warmup + a.syncs):
        version = k + 1
        if s.is_trainer:
            for name, t in mine.items():
                t.view(torch.int16).copy_(generate(name, hf[name], version, order[name]))
        else:
            for t in mine.values():
                t.view(torch.int16).fill_(0x7FFF)  # poison
        torch.cuda.synchronize()
        comm.Barrier()
        t0 = time.perf_counter()
        (s.publish if s.is_trainer else s.pull)(version)
        torch.cuda.synchronize()
        mine_s = time.perf_counter() - t0
        took = comm.allreduce(mine_s, op=MPI.MAX)
        bad = 0
        if not s.is_trainer:
            for name, t in mine.items():
                want = expected(cfg, hf, order, name, version, a.inference_tp, s.local_rank)
                bad += int((t.view(torch.int16) != want.view(t.shape)).sum().item())
        bad = comm.allreduce(bad, op=MPI.SUM)
        last = s.last_sync()
        staged = comm.allreduce(last["staged_bytes"], op=MPI.SUM)
        # --checksum: the slowest receiver's hashing, and every piece compared equal
        hashing = comm.allreduce(0.0 if s.is_trainer else last["hash_seconds"], op=MPI.MAX)
        trainer_hashing = comm.allreduce(last["hash_seconds"] if s.is_trainer else 0.0, op=MPI.MAX)
        differ = comm.allreduce(0 if s.is_trainer else last["checksum_differ"], op=MPI.SUM)
        pieces = comm.allreduce(0 if s.is_trainer else last["checksum_pieces"], op=MPI.SUM)
        if a.checksum and (differ or not pieces):
            bad += 1
        wrong += bad
        if k >= a.warmup:
            times.append(took)
        rows.append({"version": version, "time_s": took, "wrong": bad, "staged_bytes": staged, "warmup": k < a.warmup,
                     "receiver_hash_s": hashing, "trainer_hash_s": trainer_hashing, "checksum_pieces": pieces,
                     "checksum_differ": differ})
        if comm.rank == 0:
            sums = f", receivers hashed {hashing:.6f} s, {pieces} pieces, {differ} differ" if a.checksum else ""
            print(f"# sync {k + 1}/{a.warmup + a.syncs}{' (warm-up)' if k < a.warmup else ''}: {took:.6f} s, staged {staged} B{sums}, "
                  f"{bad} wrong", flush=True)
    s.close()
    if comm.rank == 0:
        med = statistics.median(times)
        mode = ("in-slots" if a.in_slots else "torch-empty") + ("+checksum" if a.checksum else "")
        timed = [r for r in rows if not r["warmup"]]
        share = statistics.median(r["receiver_hash_s"] / r["time_s"] for r in timed)
        sums = f", receivers' hashing median {100 * share:.1f}% of the sync" if a.checksum else ""
        staged = max(r["staged_bytes"] for r in timed)
        print(f"library {mode} {a.engine} tp1 -> tp{a.inference_tp}: median {med:.6f} s, min {min(times):.6f}, max {max(times):.6f} "
              f"over {len(times)} syncs{sums}, at most {staged} B staged a sync, {wrong} wrong", flush=True)
        if a.json:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from provenance import project_commit  # the project's commit, never a surrounding repository's
            json.dump({"tool": "library_bench.py", "git_sha": project_commit(), "argv": sys.argv, "config": vars(a),
                       "device": torch.cuda.get_device_name(0), "median_s": med, "receiver_hash_share_median": share, "min_s": min(times), "max_s": max(times),
                       "wrong": wrong, "syncs": rows}, open(a.json, "w"), indent=1)
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
