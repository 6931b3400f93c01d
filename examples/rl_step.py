#!/usr/bin/python3
"""An RL loop's weight sync on real tensors, through shardsync's Python API.

Trainer ranks hold a model of a bundled architecture built from its config.json (each rank
its Megatron shards), take an optimizer step between syncs, and publish each version. The
step is a deterministic numpy update that the reference replays, or with --adamw a real
PyTorch AdamW step on trainer rank 0, whose full weights then reach the other ranks over MPI
(comm.bcast, not shardsync) for their shards and the reference. Inference ranks bind parameters laid out as vLLM
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
    ap.add_argument("--torch", choices=("cpu", "cuda"), help="torch tensors on this device instead of numpy arrays")
    ap.add_argument("--checksum", action="store_true",
                    help="the library checksums every piece (trainer where it lies, receiver where it landed)")
    ap.add_argument("--test-corrupt-at", type=int, default=-1, help=argparse.SUPPRESS)  # test hook (sync index)
    ap.add_argument("--adamw", action="store_true", help="with --torch: real AdamW steps (trainer rank 0) instead of numpy updates")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    with open(os.path.join(HERE, "..", "configs", "models", args.model + ".json")) as f:
        cfg = json.load(f)
    s = shardsync.Session(comm, model=args.model, trainer=args.trainer, inference=args.inference,
                          replicas=args.replicas, engine=args.engine, memory="cuda" if args.torch == "cuda" else "host",
                          checksum=args.checksum,
                          **({"test_corrupt_at_sync": args.test_corrupt_at} if args.test_corrupt_at >= 0 else {}))
    if args.torch:
        import torch

    def new_tensor(name, shape):  # the caller's own tensor, or its slot
        if args.in_slots:
            return s.slot(name)
        if args.torch:
            return torch.empty(shape, dtype=torch.bfloat16, device=args.torch)
        return np.empty(shape, dtype=np.uint16)

    def put(dst, bits):  # bf16 bits (a uint16 array) into a tensor
        if args.torch:
            dst.view(torch.int16).copy_(torch.from_numpy(bits.view(np.int16)))
        else:
            dst[...] = bits

    def bits_of(t):
        return t.view(torch.int16).cpu().numpy().view(np.uint16) if args.torch else t

    bf16 = {} if args.torch else {"dtype": "bfloat16"}
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
            held[name] = new_tensor(name, tensors[name].shape)
            s.bind(name, held[name], **bf16)
    else:
        params = {name: new_tensor(name, info.shape) for name, info in tensors.items()}
        for name, p in params.items():
            s.bind(name, p, **bf16)
    if args.adamw and not args.torch:
        raise SystemExit("--adamw needs --torch cpu|cuda")
    if args.adamw and comm.rank == 0:  # the model, on trainer rank 0: full bf16 parameters
        model = {n: torch.nn.Parameter(torch.from_numpy(w.view(np.int16)).view(torch.bfloat16).to(args.torch).clone())
                 for n, w in full.items()}
        adamw = torch.optim.AdamW(model.values(), lr=1e-3)
        gen = torch.Generator(device=args.torch).manual_seed(args.seed)
    for step in range(1, args.steps + 1):
        if args.adamw:  # a real AdamW step on rank 0 (a random linear loss), its weights to every rank by MPI
            if comm.rank == 0:
                adamw.zero_grad()
                loss = sum((p.float() * torch.randn(p.shape, generator=gen, device=args.torch)).sum() for p in model.values())
                loss.backward()
                adamw.step()
                full = {n: p.detach().view(torch.int16).cpu().numpy().view(np.uint16) for n, p in model.items()}
            full = comm.bcast(full if comm.rank == 0 else None, root=0)
        else:
            reference.optimizer_step(full, step, args.seed)  # the trainer's step; receivers replay it for the reference
        version = step
        if s.is_trainer:
            shards = reference.megatron_shards(cfg, full, reference.parse_layout(args.trainer), s.rank)
            for name, w in shards.items():
                put(held[name], w)
            s.publish(version)
            continue
        s.pull(version)
        want = reference.vllm_params(cfg, full, reference.parse_layout(args.inference), s.local_rank)
        if set(want) != set(params):
            raise SystemExit(f"rank {s.rank}: vLLM's rules give {len(want)} parameters, shardsync's plan "
                             f"{len(params)}: {sorted(set(want) ^ set(params))[:4]}")
        got = {n: bits_of(p) for n, p in params.items()}
        wrong = {n: int(np.count_nonzero(got[n] != want[n].reshape(got[n].shape))) for n in got
                 if got[n].shape != want[n].shape or not np.array_equal(got[n], want[n])}
        last = s.last_sync()
        held_version, partial = s.held_version
        sums = (f", checksums: {last['checksum_pieces']} pieces, {last['checksum_differ']} differ, "
                f"{last['hash_seconds']:.4f} s hashing" if args.checksum else "")
        print(f"rank {s.rank} (replica {s.replica}, local {s.local_rank}): version {version}: {len(params)} parameters, "
              f"{sum(g.nbytes for g in got.values())} bytes, {last['seconds']:.4f} s, staged {last['staged_bytes']} B{sums}, "
              + ("bit-exact" if not wrong else f"{len(wrong)} WRONG, e.g. {next(iter(wrong))}")
              + (f" (held {held_version}, partial)" if partial or held_version != version else ""), flush=True)
        bad += len(wrong) + (held_version != version) + partial
        bad += args.checksum and (last["checksum_pieces"] == 0 or last["checksum_differ"] != 0)
    s.close()
    total = comm.allreduce(bad, op=MPI.SUM)
    if comm.rank == 0:
        print(f"rl_step: {args.model}, trainer {args.trainer} -> inference {args.inference} x {args.replicas}, "
              f"{args.steps} steps: " + ("every parameter bit-exact after every sync" if total == 0 else f"{total} mismatches"),
              flush=True)
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
