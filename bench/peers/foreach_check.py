#!/usr/bin/env python3
"""Where torch._foreach_copy_ goes wrong for the ipc-kept-foreach peer (torch_peers.py): the same
(destination view, source) pairs copied with one _foreach_copy_ and with copy_ each, the
sources in this process or opened through CUDA IPC from a child (as the peer's are), on the GPU
as the peer runs it: Qwen3-8B-like bf16 tensors, the destinations views of merged parameters.
Prints, per case, the elements that differ from the source; exits 1 where any do.

  python3 bench/peers/foreach_check.py [--layers 2]
"""
import argparse
import sys

import torch
import torch.multiprocessing as mp

SHAPES = [(151936, 4096), (4096,), (4096, 4096), (1024, 4096), (1024, 4096), (128,), (4096, 4096),
          (12288, 4096), (12288, 4096), (4096, 12288)]


def sources(layers):
    out = []
    for i in range(layers):
        for shape in SHAPES if i == 0 else SHAPES[1:]:
            out.append(torch.randint(-32768, 32767, shape, dtype=torch.int16, device="cuda").view(torch.bfloat16))
    return out


def views(srcs):
    """Destinations as the peer makes them: q/k/v (and gate/up) rows of one merged tensor each."""
    merged, dsts = [], []
    i = 0
    while i < len(srcs):
        s = srcs[i]
        if s.dim() == 2 and s.shape[0] == 4096 and i + 2 < len(srcs) and srcs[i + 1].shape[0] == 1024:
            group = srcs[i:i + 3]
        elif s.dim() == 2 and s.shape[0] == 12288 and i + 1 < len(srcs) and srcs[i + 1].shape[0] == 12288:
            group = srcs[i:i + 2]
        else:
            group = [s]
        m = torch.empty((sum(g.shape[0] for g in group),) + tuple(s.shape[1:]), dtype=torch.bfloat16, device="cuda")
        off = 0
        for g in group:
            dsts.append(m[off:off + g.shape[0]])
            off += g.shape[0]
        merged.append(m)
        i += len(group)
    return merged, dsts


def wrong(dsts, srcs):
    return sum(int((d.view(torch.int16) != s.view(torch.int16)).sum()) for d, s in zip(dsts, srcs))


def check(srcs, label):
    bad = 0
    for how in ("copy_", "_foreach_copy_"):
        merged, dsts = views(srcs)
        for m in merged:
            m.view(torch.int16).fill_(0x7FFF)
        torch.cuda.synchronize()
        if how == "copy_":
            for d, s in zip(dsts, srcs):
                d.copy_(s)
        else:
            torch._foreach_copy_(dsts, srcs)
        torch.cuda.synchronize()
        n = wrong(dsts, srcs)
        per = [(tuple(s.shape), wrong([d], [s])) for d, s in zip(dsts, srcs)]
        print(f"foreach_check: {label}, {how}: {n} wrong elements"
              + (f" (first: {[p for p in per if p[1]][:3]})" if n else ""), flush=True)
        bad += n
    return bad


def child(q, layers):
    torch.cuda.set_device(0)
    srcs = sources(layers)
    torch.cuda.synchronize()
    q.put(srcs)  # CUDA IPC handles, opened by the parent
    q.get()      # keep them alive until the parent is done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    a = ap.parse_args()
    torch.cuda.set_device(0)
    print(f"foreach_check: torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    bad = check(sources(a.layers), "sources in this process")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q, a.layers))
    p.start()
    srcs = q.get()
    bad += check(srcs, "sources opened through CUDA IPC")
    del srcs
    q.put("done")
    p.join()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
