#!/usr/bin/python3
"""An RL loop's weight sync on real tensors, through shardsync's Python API.

Trainer ranks hold a model of a bundled architecture built from its config.json (each rank
its Megatron shards), take an optimizer step between syncs (numpy here, or PyTorch AdamW
with --torch), and publish each version. Inference ranks bind parameters laid out as vLLM
lays them out (qkv_proj, gate_up_proj, FusedMoE w13/w2) and pull each version. After every
sync each inference rank compares its parameters bit for bit with a reference built from the
full weights by vLLM's rules (examples/reference.py, which imports nothing from shardsync).

    mpirun -np 3 /usr/bin/python3 examples/rl_step.py --model tiny-qwen3 --trainer tp1 --inference tp2
    mpirun -np 4 /usr/bin/python3 examples/rl_step.py --model tiny-qwen3-moe --trainer tp1,ep2 --inference dp2,ep2

(with PYTHONPATH=build/python). Exit status 0 when every sync of every rank was bit-exact.
"""
import argparse
import json
import os
import sys

import numpy as np
from mpi4py import MPI

import reference
import shardsync

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-qwen3", help="a bundled model (configs/models/NAME.json)")
    ap.add_argument("--trainer", default="tp1", help="trainer layout: tpN[,epM]")
    ap.add_argument("--inference", default="tp2", help="one replica's layout: tpN or dpN,epN")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--engine", default="v3")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps, each followed by a sync")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--in-slots", action="store_true",
                    help="keep the tensors in the library's slots (zero copy) instead of the caller's own arrays")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    with open(os.path.join(HERE, "..", "configs", "models", args.model + ".json")) as f:
        cfg = json.load(f)
    s = shardsync.Session(comm, model=args.model, trainer=args.trainer, inference=args.inference,
                          replicas=args.replicas, engine=args.engine)
    tensors = s.tensors()
    full = reference.initial_weights(cfg, args.seed)  # every rank builds the same full weights
    bad = 0
    if s.is_trainer:
        mine = reference.megatron_shards(cfg, full, reference.parse_layout(args.trainer), s.rank)
        if set(mine) != set(tensors):
            raise SystemExit(f"rank {s.rank}: Megatron's rules give {len(mine)} tensors, shardsync's layout "
                             f"{len(tensors)}: {sorted(set(mine) ^ set(tensors))[:4]}")
        held = {}
        for name in tensors:
            held[name] = s.slot(name) if args.in_slots else np.empty(tensors[name].shape, dtype=np.uint16)
            s.bind(name, held[name], dtype="bfloat16")
    else:
        params = {name: (s.slot(name) if args.in_slots else np.empty(info.shape, dtype=np.uint16))
                  for name, info in tensors.items()}
        for name, p in params.items():
            s.bind(name, p, dtype="bfloat16")
    for step in range(1, args.steps + 1):
        reference.optimizer_step(full, step, args.seed)  # the trainer's step; receivers replay it for the reference
        version = step
        if s.is_trainer:
            shards = reference.megatron_shards(cfg, full, reference.parse_layout(args.trainer), s.rank)
            for name, w in shards.items():
                held[name][...] = w
            s.publish(version)
            continue
        s.pull(version)
        want = reference.vllm_params(cfg, full, reference.parse_layout(args.inference), s.local_rank)
        if set(want) != set(params):
            raise SystemExit(f"rank {s.rank}: vLLM's rules give {len(want)} parameters, shardsync's plan "
                             f"{len(params)}: {sorted(set(want) ^ set(params))[:4]}")
        wrong = {n: int(np.count_nonzero(params[n] != want[n].reshape(params[n].shape))) for n in params
                 if params[n].shape != want[n].shape or not np.array_equal(params[n], want[n])}
        last = s.last_sync()
        held_version, partial = s.held_version
        print(f"rank {s.rank} (replica {s.replica}, local {s.local_rank}): version {version}: {len(params)} parameters, "
              f"{sum(p.nbytes for p in params.values())} bytes, {last['seconds']:.4f} s, staged {last['staged_bytes']} B, "
              + ("bit-exact" if not wrong else f"{len(wrong)} WRONG, e.g. {next(iter(wrong))}")
              + (f" (held {held_version}, partial)" if partial or held_version != version else ""), flush=True)
        bad += len(wrong) + (held_version != version) + partial
    s.close()
    total = comm.allreduce(bad, op=MPI.SUM)
    if comm.rank == 0:
        print(f"rl_step: {args.model}, trainer {args.trainer} -> inference {args.inference} x {args.replicas}, "
              f"{args.steps} steps: " + ("every parameter bit-exact after every sync" if total == 0 else f"{total} mismatches"),
              flush=True)
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
