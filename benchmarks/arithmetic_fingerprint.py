"""Which kernel computes other bits on another CPU: a hash per primitive the tiny model's build and training use,
under repro's pinned arithmetic.

The pin (repro/arithmetic.py) makes every kernel choice on one CPU give the same bits, but the main job on an
Intel Xeon and on an AMD EPYC built different tiny models (docs/cpu-miniature.md, "One arithmetic per CPU").
Run this on each machine and compare: the first primitive whose hash differs is where the arithmetic still
depends on the CPU. Inputs come from numpy's PCG64 integers scaled by powers of two, so they are the same bits
everywhere; each output is hashed whole.

    .venv/bin/python benchmarks/arithmetic_fingerprint.py                      # print this CPU's hashes
    .venv/bin/python benchmarks/arithmetic_fingerprint.py --out results/arithmetic/NAME.json
    .venv/bin/python benchmarks/arithmetic_fingerprint.py --compare results/arithmetic/*.json

Another vendor's CPU, emulated (Debian's qemu-user; CPUID answers as an AMD EPYC, the approximate instructions
are computed qemu's way; about 40 s):

    qemu-x86_64 -cpu EPYC-v3 .venv/bin/python benchmarks/arithmetic_fingerprint.py --cpu "qemu EPYC-v3" --out F
"""

from __future__ import annotations

import sys

from repro import arithmetic

arithmetic.pin()  # before torch and numpy load, as every repro process does

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402


def _digest(tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def _inputs(seed: int, *shape: int):
    """Exactly representable floats in [-1, 1): integers / 2^15 from PCG64, the same on every machine."""
    import numpy as np
    import torch

    ints = np.random.Generator(np.random.PCG64(seed)).integers(-(2**15), 2**15, size=shape)
    return torch.from_numpy((ints / 2.0**15).astype(np.float32))


def primitives() -> dict[str, Callable[[], object]]:
    import torch
    import torch.nn.functional as F

    from repro.cpu_lm import blas
    from repro.cpu_lm.adamw import AdamW

    a, b = _inputs(1, 256, 300), _inputs(2, 300, 200)
    x, w = _inputs(3, 64, 128), _inputs(4, 512, 128)
    bias = _inputs(5, 512)
    logits, target = _inputs(6, 32, 97) * 8, torch.arange(32) % 97

    def adamw(optimizer=torch.optim.AdamW):
        p = torch.nn.Parameter(_inputs(7, 128, 128))
        opt = optimizer([p], lr=1e-3, weight_decay=0.01)
        for k in range(3):
            p.grad = _inputs(8 + k, 128, 128)
            opt.step()
        return p

    def ce_backward():
        z = logits.clone().requires_grad_(True)
        F.cross_entropy(z, target).backward()
        return z.grad

    def linear_backward():
        xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        (F.linear(xx, ww, bias) ** 2).sum().backward()
        return torch.cat([xx.grad.flatten(), ww.grad.flatten()])

    def clip_grad_norm():
        params = [torch.nn.Parameter(_inputs(30 + i, 64, 64)) for i in range(3)]
        for k, q in enumerate(params):
            q.grad = _inputs(40 + k, 64, 64)
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        return torch.cat([norm.reshape(1)] + [q.grad.flatten() for q in params])

    def multinomial():
        g = torch.Generator().manual_seed(0)
        return torch.multinomial(torch.softmax(logits, -1), 8, replacement=True, generator=g).float()

    def numpy_ufuncs():  # the simulator's and the reward statistics' arithmetic: numpy's own SIMD kernels
        import numpy as np

        outs = []
        for dtype in (np.float32, np.float64):
            x = a.numpy().astype(dtype)
            outs += [np.exp(x), np.log(np.abs(x) + dtype(1e-3)), np.sqrt(np.abs(x)), np.tanh(x), np.sin(x * 50)]
        return torch.from_numpy(np.concatenate([o.astype(np.float64).ravel() for o in outs]))

    def numpy_draws():  # the simulator's prompts: Beta pass rates and Binomial rewards from numpy's Generator
        import numpy as np

        rng = np.random.default_rng(0)
        rates = rng.beta(0.4, 1.1, 4096)
        return torch.from_numpy(np.concatenate([rates, rng.binomial(16, rates) / 16.0, rng.standard_normal(64)]))

    def blas_linear_backward():  # the CPU trainer's products (repro.cpu_lm.blas: numpy's OpenBLAS, Haswell kernels)
        xx, ww, bb = (t.clone().requires_grad_(True) for t in (x, w, bias))
        (blas.linear(xx.view(8, 8, 128), ww, bb) ** 2).sum().backward()
        return torch.cat([xx.grad.flatten(), ww.grad.flatten(), bb.grad.flatten()])

    def attention():
        q, k, v = (_inputs(20 + i, 4, 2, 48, 32) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {
        "mm 256x300 @ 300x200": lambda: a @ b,
        "mm 64x128 @ 128x512": lambda: x @ w.T,
        "linear": lambda: F.linear(x, w, bias),
        "linear backward": linear_backward,
        "bmm": lambda: torch.bmm(_inputs(10, 8, 48, 32), _inputs(11, 8, 32, 48)),
        "softmax": lambda: torch.softmax(logits, -1),
        "log_softmax": lambda: torch.log_softmax(logits, -1),
        "layer_norm": lambda: F.layer_norm(a, (300,)),
        "gelu (erf)": lambda: F.gelu(a),
        "gelu (tanh)": lambda: F.gelu(a, approximate="tanh"),
        "exp": lambda: torch.exp(a),
        "log": lambda: torch.log(a.abs() + 1e-3),
        "tanh": lambda: torch.tanh(a),
        "sigmoid": lambda: torch.sigmoid(a),
        "sum (dim 1)": lambda: a.sum(1),
        "sum (all)": lambda: a.sum(),
        "cross_entropy backward": ce_backward,
        "scaled_dot_product_attention": attention,
        "adamw x3": adamw,
        "adamw x3 (repro.local.adamw)": lambda: adamw(AdamW),
        "sqrt": lambda: torch.sqrt(a.abs()),
        "rsqrt": lambda: torch.rsqrt(a.abs() + 1e-3),
        "rms_norm": lambda: F.rms_norm(a, (300,), eps=1e-6),
        "vector_norm": lambda: torch.linalg.vector_norm(a),
        "clip_grad_norm_": clip_grad_norm,
        "silu": lambda: F.silu(a),
        "sin, cos": lambda: torch.cat([torch.sin(a * 50), torch.cos(a * 50)]),
        "pow": lambda: 10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64),
        "std (dim 1)": lambda: a.std(1),
        "multinomial": multinomial,
        "numpy ufuncs (float32, float64)": numpy_ufuncs,
        "numpy Beta/Binomial draws": numpy_draws,
        "OpenBLAS sgemm 256x300 @ 300x200": lambda: blas.linear(a, b.T.contiguous()),
        "OpenBLAS sgemm, 3 rows": lambda: blas.linear(a[:3], b.T.contiguous()),
        "OpenBLAS linear and backward": blas_linear_backward,
    }


def fingerprint() -> dict:
    import numpy
    import torch

    return {
        "arithmetic": arithmetic.in_force(),
        "torch": torch.__version__,
        # numpy's dispatch targets and their names change between versions (issue 43): the record says which ran
        "numpy": numpy.__version__,
        arithmetic.NUMPY_ENV: arithmetic.pinned_env().get(arithmetic.NUMPY_ENV) if not arithmetic.native() else None,
        "hashes": {name: _digest(make()) for name, make in primitives().items()},
    }


def compare(paths: list[Path]) -> int:
    prints = {p.stem: json.loads(p.read_text()) for p in paths}
    names = list(next(iter(prints.values()))["hashes"])
    for label, fp in prints.items():
        numpy = f", numpy {fp['numpy']}" if "numpy" in fp else ""  # records before issue 43 lack it
        print(f"{label}: {fp['arithmetic']['cpu']}, torch {fp['torch']}{numpy}")
    differ = [n for n in names if len({fp["hashes"].get(n) for fp in prints.values()}) > 1]
    for name in names:
        print(f"  {'DIFFERS' if name in differ else 'same   '}  {name}")
    return 1 if differ else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write this CPU's fingerprint as JSON")
    parser.add_argument("--compare", type=Path, nargs="+", help="fingerprint files to compare")
    parser.add_argument("--cpu", help="the CPU to record (under qemu-user /proc/cpuinfo still names the host's)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(args.compare)
    found = fingerprint()
    if args.cpu:
        found["arithmetic"]["cpu"] = args.cpu
    for name, digest in found["hashes"].items():
        print(f"{digest}  {name}")
    print(
        f"on {found['arithmetic']['cpu']} ({found['arithmetic']['torch_capability']}, torch {found['torch']}, "
        f"numpy {found['numpy']}, {arithmetic.NUMPY_ENV}={found[arithmetic.NUMPY_ENV]})"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
