#!/usr/bin/env python3
"""fp8_vs_torch.py BENCH [--json OUT]: block FP8 quantization, shardsync's against PyTorch's.

Builds a bf16 matrix of edge cases (every bf16 value of magnitude <= 448 in blocks whose scale
is exactly 1, so each code is the conversion of that value itself: subnormal results, every tie
and saturation; a zero block; NaN and Inf among finite values; a block with nothing finite; a
block of bf16 subnormals whose scale is an fp32 subnormal; normal weights with outliers; values
over 2^-30 .. 2^30; partial blocks at the right and bottom edges), has BENCH
(shardsync-fp8-bench --device cuda --in ... --out ...) quantize it on the GPU and with the CPU
twin, and compares both, bit for bit, with PyTorch on the CPU and on the GPU:

    amax  = |x| over the block's finite values, in fp32
    scale = amax / 448 where amax > 0, else 1
    code  = (x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)

PyTorch on the CPU must agree on every code; on the GPU its conversion writes 0x7f for a
negative NaN too (fp8.hpp keeps the sign, 0xff): those are counted apart.

Exit status: 0 all equal, 1 a difference (the first ones printed), 77 no torch or no GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("fp8_vs_torch: skipped: python3 has no torch")
    sys.exit(77)

ROWS, COLS, B = 421, 603, 128  # 4 x 5 blocks, the last row and column of blocks partial


def bf16_from_bits(bits):
    return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def edge_matrix():
    g = torch.Generator().manual_seed(20)
    x = torch.zeros(ROWS, COLS, dtype=torch.bfloat16)
    blk = lambda r, c: x[r * B:(r + 1) * B, c * B:(c + 1) * B]
    # Every bf16 magnitude up to 448 (0x43e0), both signs, over blocks (0,0) (0,1) (0,2) (0,3),
    # each holding 448 so that its scale is exactly 1.
    mags = list(range(0, 0x43e1))
    every = mags + [m | 0x8000 for m in mags]
    per = B * B - 1
    for i, c in enumerate(range(4)):
        part = every[i * per:(i + 1) * per]
        vals = torch.cat([bf16_from_bits([0x43e0]), bf16_from_bits(part)])
        b = blk(0, c).reshape(-1)
        b[:vals.numel()] = vals
        blk(0, c).copy_(b.reshape(B, B))
    assert 4 * per >= len(every)
    # (1,0) zeros. (1,1): NaN and +-Inf among normal weights. (1,2): nothing finite.
    w = (torch.randn(B, B, generator=g) * 0.02)
    w.view(-1)[::97] = float("nan")
    w.view(-1)[5::211] = float("inf")
    w.view(-1)[7::223] = float("-inf")
    blk(1, 1).copy_(w.to(torch.bfloat16))
    nf = torch.full((B, B), float("nan"))
    nf.view(-1)[::3] = float("inf")
    nf.view(-1)[1::3] = float("-inf")
    blk(1, 2).copy_(nf.to(torch.bfloat16))
    # (1,3): bf16 subnormals (below 2^-126): the scale is an fp32 subnormal.
    sub = torch.randint(1, 0x80, (B, B), generator=g, dtype=torch.int32)
    sub = torch.where(torch.rand(B, B, generator=g) < 0.5, sub, sub | 0x8000)
    blk(1, 3).copy_(sub.to(torch.int16).view(torch.bfloat16))
    # Rows 2 and 3 of blocks: normal weights with a few outliers, then values over 2^-30..2^30.
    for c in range(5):
        n = blk(2, c)
        v = torch.randn(n.shape, generator=g) * 0.02
        v.view(-1)[torch.randint(0, v.numel(), (4,), generator=g)] *= 50
        n.copy_(v.to(torch.bfloat16))
        m = blk(3, c)
        e = torch.randint(-30, 31, m.shape, generator=g).float()
        s = torch.where(torch.rand(m.shape, generator=g) < 0.5, -1.0, 1.0)
        m.copy_((s * torch.rand(m.shape, generator=g).add(1) * torch.pow(2.0, e)).to(torch.bfloat16))
    # (0,4) partial: ties at a scale of exactly 1 again (448 and the odd multiples of 2^-10 .. 16).
    t = [448.0] + [k * 2.0 ** p for p in range(-10, 5) for k in range(1, 32, 2)]
    b = blk(0, 4).reshape(-1)
    b[:len(t)] = torch.tensor(t).to(torch.bfloat16)
    blk(0, 4).copy_(b.reshape(blk(0, 4).shape))
    return x


def torch_quantize(x, dev):
    """(codes uint8 [R, C], scales fp32 [ceil(R/128), ceil(C/128)]) by PyTorch on `dev`."""
    xf = x.to(dev).float()
    br, bc = -(-ROWS // B), -(-COLS // B)
    pad = torch.zeros(br * B, bc * B, device=dev)
    finite = torch.where(torch.isfinite(xf), xf.abs(), torch.zeros_like(xf))
    pad[:ROWS, :COLS] = finite
    amax = pad.reshape(br, B, bc, B).amax(dim=(1, 3))
    # A tensor divisor: PyTorch on CUDA turns division by a Python scalar into a multiplication
    # by its reciprocal, which is not amax / 448 rounded once (1 ulp off in 8 of 20 blocks).
    scale = torch.where(amax > 0, amax / torch.full_like(amax, 448.0), torch.ones_like(amax))
    full = scale.repeat_interleave(B, 0).repeat_interleave(B, 1)[:ROWS, :COLS]
    codes = (xf / full).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return codes.cpu(), scale.cpu()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", help="shardsync-fp8-bench")
    ap.add_argument("--json", default="", help="write the comparison's counts here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fp8_vs_torch: skipped: torch sees no GPU")
        return 77
    x = edge_matrix()
    br, bc = -(-ROWS // B), -(-COLS // B)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "x.bf16")
        x.view(torch.int16).numpy().tofile(src)
        out = subprocess.run([args.bench, "--device", "cuda", "--rows", str(ROWS), "--cols", str(COLS), "--reps", "1",
                              "--in", src, "--out", tmp], capture_output=True, text=True)
        print(out.stdout, end="")
        if out.returncode not in (0, 1):
            print("fp8_vs_torch: %s failed (%d): %s" % (args.bench, out.returncode, out.stderr))
            return 1
        got = {}
        for who in ("device", "twin"):
            with open(os.path.join(tmp, who + ".codes"), "rb") as f:
                got[who + " codes"] = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(ROWS, COLS)
            with open(os.path.join(tmp, who + ".scales"), "rb") as f:
                got[who + " scales"] = torch.frombuffer(bytearray(f.read()), dtype=torch.int32).reshape(br, bc)
    report, bad = {"rows": ROWS, "cols": COLS, "blocks": br * bc, "torch": torch.__version__}, 0
    for dev in ("cpu", "cuda"):
        codes, scales = torch_quantize(x, dev)
        want = {"codes": codes, "scales": scales.view(torch.int32)}
        for who in ("device", "twin"):
            for what in ("codes", "scales"):
                differ = got[who + " " + what] != want[what]
                key = "%s %s vs torch %s" % (who, what, dev)
                if what == "codes" and dev == "cuda":
                    # PyTorch's CUDA conversion writes 0x7f for every NaN, dropping a negative
                    # NaN's sign (its CPU conversion keeps it, 0xff, as fp8.hpp does): counted
                    # apart, not as a difference.
                    nan_sign = differ & torch.isnan(x.float()) & ((got[who + " " + what] & 0x7f) == 0x7f) & \
                        ((want[what] & 0x7f) == 0x7f)
                    report[key + " (NaN sign only)"] = int(nan_sign.sum())
                    print("fp8_vs_torch: %-32s %d NaN codes differ in their sign only" % (key, int(nan_sign.sum())))
                    differ = differ & ~nan_sign
                diff = differ.nonzero()
                report[key] = int(diff.shape[0])
                print("fp8_vs_torch: %-32s %d of %d differ" % (key, diff.shape[0], want[what].numel()))
                for r, c in diff[:5].tolist():
                    print("  at [%d, %d]: input %s (bf16 0x%04x), shardsync 0x%x, torch 0x%x" % (
                        r, c, x[r, c].item() if what == "codes" else "-",
                        x[r, c].view(torch.int16).item() & 0xffff if what == "codes" else 0,
                        got[who + " " + what][r, c].item() & 0xffffffff, want[what][r, c].item() & 0xffffffff))
                bad += diff.shape[0]
    # What the edge blocks exercised, from torch's own codes.
    c = want["codes"]
    report["exercised"] = {"subnormal_codes": int(((c & 0x78) == 0).logical_and((c & 7) != 0).sum()),
                           "saturated_448": int(((c & 0x7f) == 0x7e).sum()), "nan_codes": int(((c & 0x7f) == 0x7f).sum()),
                           "blocks_of_scale_1": int((scales == 1).sum())}
    print("fp8_vs_torch: exercised %s" % report["exercised"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print("fp8_vs_torch: %s" % ("every code and scale equal" if bad == 0 else "%d differences" % bad))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
