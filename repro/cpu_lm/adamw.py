"""AdamW whose step computes the same bits on every x86 CPU.

torch 2.13's float32 `sqrt` kernel under ATEN_CPU_CAPABILITY=avx2 is not correctly rounded: it refines the
CPU's approximate reciprocal square root (RSQRTPS), whose bits the x86 manuals leave to each vendor, so Intel
and AMD get different second-moment denominators (up to 1 ulp on ~15% of elements) and the tiny model's
training diverges from its first update (issue 35; `benchmarks/arithmetic_fingerprint.py` names the kernel).
The float64 `sqrt` is IEEE's correctly rounded one on every CPU, and a float64 square root rounded to
float32 is the correctly rounded float32 one (53 >= 2*24 + 2 bits), so this step takes the denominator's
root there. Everything else is torch's single-tensor AdamW (torch/optim/adam.py, `_single_tensor_adam`),
operation for operation, and the state is torch's (`step`, `exp_avg`, `exp_avg_sq`): checkpoints written
with torch.optim.AdamW load into it.
"""

from __future__ import annotations

import torch


def exact_sqrt(t: torch.Tensor) -> torch.Tensor:
    """float32 square root, correctly rounded whatever the CPU's approximate instructions."""
    return t.double().sqrt_().to(t.dtype)


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW (decoupled weight decay, no amsgrad) with `exact_sqrt` for the denominator."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad, state = param.grad, self.state[param]
                if not state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                if decay != 0:
                    param.mul_(1 - lr * decay)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = state["step"].item()
                step_size = lr / (1 - beta1**step)
                denom = (exact_sqrt(exp_avg_sq) / (1 - beta2**step) ** 0.5).add_(eps)
                param.addcdiv_(exp_avg, denom, value=-step_size)
        return loss
