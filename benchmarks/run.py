"""Performance benchmarks of attnlib (not timed tests: they measure and report, they do not fail on a slow machine).

    python benchmarks/run.py --quick                       # about half a minute on a 2-core CPU
    python benchmarks/run.py                               # the full sweep, T up to 4096
    python benchmarks/run.py --device cuda --dtype bfloat16 --sdpa-backend flash

1. The library's MultiHeadAttention (fused W_QKV, then F.scaled_dot_product_attention with is_causal=True)
   against torch.nn.MultiheadAttention holding the same weights (attnlib.reference.to_torch_mha), B=4, T=256,
   d_model=256, h=8: forward (no grad) and forward + backward, timed in turns A B A B ….
2. backend="plain" (materialises the (B, h, T, T) weights) against backend="sdpa" as T grows: time and peak memory.
3. Tokens per second of a whole training step (forward, backward, AdamW) of attnlib.GPT at a small size.

The last line printed is always ``lib/torch MHA time ratio: X.XX`` (forward + backward, median of the ratios of
neighbouring runs); the forward ratios are printed just above it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
import warnings
from statistics import median

import torch

try:
    import attnlib
except ImportError:   # run from a checkout without installing the library
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import attnlib

from attnlib import GPT, MultiHeadAttention
from attnlib.costs import model_flops, ops_called, peak_memory, time_interleaved
from attnlib.reference import to_torch_mha

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SDPA_BACKENDS = ("auto", "flash", "efficient", "math")


def sdpa_context(name: str):
    """A context that restricts F.scaled_dot_product_attention to one kernel ("auto" lets torch choose)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "math": SDPBackend.MATH}[name])


def sdpa_works(name: str, device, dtype) -> str | None:
    """None if the SDPA kernel ``name`` runs a causal (1, 8, 64, 32) attention here, else torch's reason."""
    q = torch.randn(1, 8, 64, 32, device=device, dtype=dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch warns once per kernel it rejects; the error says enough
            with sdpa_context(name):
                torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    except RuntimeError as e:
        return str(e).strip().splitlines()[0]
    return None


def ratio_of_neighbours(a: list[float], b: list[float]) -> float:
    """Median over runs i of a[i] / b[i]: each pair ran back to back, so a slow spell of the machine cancels."""
    return median([x / y for x, y in zip(a, b)])


def ms(xs: list[float]) -> str:
    return f"{1e3 * median(xs):9.2f}"


def mib(n: int) -> str:
    return f"{n / 2**20:10.2f}"


# ------------------------------------------------------------------------------------------------------- 1.


def bench_mha(args, device, dtype) -> dict:
    B, T, d_model, h = 4, 256, 256, 8
    print(f"\n1. Multi-head attention against torch.nn.MultiheadAttention with the same weights, "
          f"B={B} T={T} d_model={d_model} h={h}")
    torch.manual_seed(0)
    lib = MultiHeadAttention(d_model, h).to(device=device, dtype=dtype)
    # Same weights twice. In train mode (dropout is 0) torch always takes its general path,
    # F.multi_head_attention_forward, which calls SDPA with is_causal=True like the library; in eval mode without
    # gradients it takes its "fast path", torch._native_multi_head_attention, which gets the mask as a table.
    ref = to_torch_mha(lib).train()
    ref_fast = to_torch_mha(lib).eval()
    x = torch.randn(B, T, d_model, device=device, dtype=dtype)
    mask = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)   # True = may not attend

    def torch_general(inp):
        return ref(inp, inp, inp, attn_mask=mask, is_causal=True, need_weights=False)[0]

    def torch_fast(inp):
        return ref_fast(inp, inp, inp, attn_mask=mask, is_causal=True, need_weights=False)[0]

    fns = {"lib": lambda: lib(x), "torch": lambda: torch_general(x), "torch_fast": lambda: torch_fast(x)}
    with torch.no_grad():
        err = (lib(x) - torch_general(x)).abs().max().item()
        try:
            err_fast = (lib(x) - torch_fast(x)).abs().max().item()
        except RuntimeError as e:   # e.g. a kernel excluded by --sdpa-backend
            print(f"   (torch's fast path does not run here: {str(e).splitlines()[0]})")
            err_fast = None
            del fns["torch_fast"]
        paths = {"lib": ops_called(fns["lib"]), "torch general path": ops_called(fns["torch"])}
        if "torch_fast" in fns:
            paths["torch fast path"] = ops_called(fns["torch_fast"])
    n_fwd, n_fb = (30, 20) if args.quick else (100, 40)
    with torch.no_grad():
        fwd = time_interleaved(fns, repeat=n_fwd, warmup=3, device=device)

    xg = x.clone().requires_grad_()

    def fb_lib():
        lib(xg).float().sum().backward()

    def fb_torch():
        torch_general(xg).float().sum().backward()

    fb = time_interleaved({"lib": fb_lib, "torch": fb_torch}, repeat=n_fb, warmup=2, device=device)

    r = {
        "shape": {"B": B, "T": T, "d_model": d_model, "h": h},
        "max_abs_difference": {"general path": err, "fast path": err_fast},
        "kernels": paths,
        "forward_ms": {k: 1e3 * median(v) for k, v in fwd.items()},
        "forward_backward_ms": {k: 1e3 * median(v) for k, v in fb.items()},
        "ratio_forward": ratio_of_neighbours(fwd["lib"], fwd["torch"]),
        "ratio_forward_vs_fast_path": (ratio_of_neighbours(fwd["lib"], fwd["torch_fast"]) if "torch_fast" in fwd
                                       else None),
        "ratio_forward_backward": ratio_of_neighbours(fb["lib"], fb["torch"]),
        "pairs": {"forward": n_fwd, "forward_backward": n_fb},
    }
    fast = f", {err_fast:.1e} (fast path)" if err_fast is not None else ""
    print(f"   largest difference of outputs: {err:.1e} (general path){fast}")
    for name, ops in paths.items():
        print(f"   {name:20s} runs {', '.join(ops) or '(no attention kernel seen)'}")
    print(f"   {'':38s} median ms")
    print(f"   {'lib forward (no grad)':38s}{ms(fwd['lib'])}")
    print(f"   {'torch forward, general path':38s}{ms(fwd['torch'])}")
    if "torch_fast" in fwd:
        print(f"   {'torch forward, fast path (eval+no grad)':38s}{ms(fwd['torch_fast'])}")
    print(f"   {'lib forward + backward':38s}{ms(fb['lib'])}")
    print(f"   {'torch forward + backward':38s}{ms(fb['torch'])}")
    return r


# ------------------------------------------------------------------------------------------------------- 2.


def bench_plain_vs_sdpa(args, device, dtype) -> list[dict]:
    B, d_model, h = 1, 256, 8
    Ts = [64, 128, 256, 512, 1024] + ([] if args.quick else [2048, 4096])
    repeat = 5 if args.quick else 7
    torch.manual_seed(0)
    mods = {be: MultiHeadAttention(d_model, h, backend=be).to(device=device, dtype=dtype).eval()
            for be in ("plain", "sdpa")}
    mods["sdpa"].load_state_dict(mods["plain"].state_dict())
    nbytes = torch.finfo(dtype).bits // 8
    print(f"\n2. backend='plain' against backend='sdpa' (forward, no grad), B={B} d_model={d_model} h={h}")
    print(f"   {'T':>5} {'plain ms':>9} {'sdpa ms':>9} {'speed-up':>8} {'plain MiB':>10} {'sdpa MiB':>10} "
          f"{'one (B,h,T,T) MiB':>18}")
    rows = []
    for T in Ts:
        x = torch.randn(B, T, d_model, device=device, dtype=dtype)
        with torch.no_grad():
            t = time_interleaved({be: (lambda m=m, x=x: m(x)) for be, m in mods.items()}, repeat=repeat, warmup=1,
                                 device=device)
            mem = {be: peak_memory(lambda m=m, x=x: m(x), device) for be, m in mods.items()}
        one_table = B * h * T * T * nbytes
        row = {"T": T, "plain_ms": 1e3 * median(t["plain"]), "sdpa_ms": 1e3 * median(t["sdpa"]),
               "plain_peak_bytes": mem["plain"], "sdpa_peak_bytes": mem["sdpa"], "weights_bytes": one_table}
        rows.append(row)
        print(f"   {T:5d} {row['plain_ms']:9.2f} {row['sdpa_ms']:9.2f} {row['plain_ms'] / row['sdpa_ms']:8.1f} "
              f"{mib(mem['plain'])} {mib(mem['sdpa'])} {mib(one_table):>18}")
    return rows


# ------------------------------------------------------------------------------------------------------- 3.


def bench_training(args, device, dtype) -> dict:
    cfg = {"vocab_size": 96, "d_model": 128, "h": 4, "L": 4, "max_T": 128}
    B, T = 16, 128
    steps = 5 if args.quick else 20
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, cfg["vocab_size"], (B, T + 1), generator=g).to(device) for _ in range(4)]
    runs = {}
    for be in ("sdpa", "plain"):
        torch.manual_seed(0)
        model = GPT(**cfg, backend=be).to(device=device, dtype=dtype).train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        i = [0]

        def step(model=model, opt=opt, i=i):
            ids = batches[i[0] % len(batches)]
            i[0] += 1
            loss = model.loss(ids[:, :-1], ids[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        runs[be] = step
    t = time_interleaved(runs, repeat=steps, warmup=2, device=device)
    flops = model_flops(B, T, cfg["d_model"], cfg["h"], cfg["L"], cfg["vocab_size"], backward=True)["model"]
    r = {"config": {**cfg, "B": B, "T": T}, "steps": steps, "matmul_flops_per_step": flops}
    print(f"\n3. Training step of attnlib.GPT ({', '.join(f'{k}={v}' for k, v in cfg.items())}), B={B} T={T}, AdamW")
    print(f"   {'backend':8s} {'ms/step':>9} {'tokens/s':>10} {'GFLOP/s':>8}")
    for be, ts in t.items():
        s = median(ts)
        r[be] = {"ms_per_step": 1e3 * s, "tokens_per_s": B * T / s, "gflop_per_s": flops / s / 1e9}
        print(f"   {be:8s} {1e3 * s:9.1f} {B * T / s:10.0f} {flops / s / 1e9:8.1f}")
    return r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repeats and T only up to 1024 (under a minute on CPU)")
    p.add_argument("--device", default=str(attnlib.pick_device()), help="cpu, cuda, mps (default: %(default)s)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--sdpa-backend", choices=SDPA_BACKENDS, default="auto",
                   help="restrict scaled_dot_product_attention to one kernel (flash: FlashAttention)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for torch (default 1: steadiest timings on a shared machine)")
    p.add_argument("--json", metavar="PATH", help="also save every number to this JSON file")
    args = p.parse_args(argv)

    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch sees no CUDA device here")
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    reason = sdpa_works(args.sdpa_backend, device, dtype)
    if reason is not None:
        usable = [b for b in SDPA_BACKENDS if sdpa_works(b, device, dtype) is None]
        print(f"--sdpa-backend {args.sdpa_backend} is not available on {device.type} with {args.dtype}: {reason}\n"
              f"Backends that run here: {', '.join(usable)}. "
              f"('efficient' exists on CUDA only; 'flash' on CUDA needs float16 or bfloat16 and a recent GPU, "
              f"on CPU it is torch's own FlashAttention-style kernel.)",
              file=sys.stderr)
        return 2

    started = time.perf_counter()
    gpu = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
    print(f"attnlib benchmarks: torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"device {device}{gpu}, {args.dtype}, {torch.get_num_threads()} CPU thread(s), "
          f"SDPA backend {args.sdpa_backend}, {'quick' if args.quick else 'full'} mode")
    with sdpa_context(args.sdpa_backend):
        results = {
            "env": {"torch": torch.__version__, "device": str(device) + gpu, "dtype": args.dtype,
                    "threads": torch.get_num_threads(), "sdpa_backend": args.sdpa_backend, "quick": args.quick},
            "mha_vs_torch": bench_mha(args, device, dtype),
            "plain_vs_sdpa": bench_plain_vs_sdpa(args, device, dtype),
            "training": bench_training(args, device, dtype),
        }
    results["wall_s"] = time.perf_counter() - started
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        print(f"\nsaved {args.json}")
    m = results["mha_vs_torch"]
    print(f"\nwall time {results['wall_s']:.1f} s")
    if m["ratio_forward_vs_fast_path"] is not None:
        print(f"lib/torch MHA forward ratio (torch fast path): {m['ratio_forward_vs_fast_path']:.2f}")
    print(f"lib/torch MHA forward ratio (torch general path, same SDPA kernel): {m['ratio_forward']:.2f}")
    print(f"lib/torch MHA forward+backward ratio: {m['ratio_forward_backward']:.2f}")
    print(f"lib/torch MHA time ratio: {m['ratio_forward_backward']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
