"""How long the end of an allocation takes for a GPU cell: the step in flight, its save, and the save's barrier.

Slurm warns the job `margin` seconds before --time (`repro.launch.slurm`); the trainer finishes the step it
is on, saves it and exits, and the job requeues. A margin shorter than that step plus its save ends the job
TIMEOUT, which is not requeued, and loses the step. And during the save verl's rank 0 gathers the full
state dict and writes the Hugging Face weights alone while every other rank waits at a collective: a wait
longer than the process group's timeout (torch's NCCL default, 600 s, since verl creates its group with
`timeout_second=None`) kills the job mid-save. Both follow from one estimate, per backbone:

    save  = (rank 0's shard of model + optimizer + extra, + the gathered hf_model) / write speed
    slim  = the save that leaves the newest K rewritten in bf16 (repro.rundir.retention): read fp32, write bf16
    margin  = slowest step + save + slim + Slurm's timer slack
    barrier = max(torch's gloo default 1800 s, barrier_factor x save)

The numbers are catalog data (repro/catalog/gpu_node.yaml) with their sources; the write speed is an
assumption a user replaces with a measured one through REPRO_WRITE_MB_PER_S.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from repro import catalog
from repro.checkpoint_bytes import DEFAULT_MODEL_DTYPE, DTYPE_BYTES, HF_MODEL_BYTES, hf_bytes, sharded_bytes
from repro.overrides import override_values
from repro.rundir.slim import SLIM_DTYPE

WRITE_SPEED_ENV = "REPRO_WRITE_MB_PER_S"  # a measured write speed of the cluster's file system, MB/s
DIST_TIMEOUT_ENV = "REPRO_DIST_TIMEOUT_S"  # what repro.verl_plugin.dist_timeout passes to the process group
BARRIER_FLOOR_S = 1800  # torch's default process-group timeout for gloo (and 3x NCCL's 600 s)
_SLIM_BYTES = HF_MODEL_BYTES + DTYPE_BYTES[SLIM_DTYPE]  # read the fp32 hf_model, write it in bf16
MODEL_DTYPE_KEY = "actor_rollout_ref.actor.fsdp_config.model_dtype"


@dataclass(frozen=True)
class AllocationEnd:
    backbone: str
    step_s: float
    step_source: str
    rank0_bytes: int  # what rank 0 writes in one save
    slim_bytes: int  # what slimming the save that leaves the newest K reads and writes
    write_mb_per_s: float
    speed_source: str
    slack_s: float
    barrier_factor: float

    @property
    def save_s(self) -> float:
        return self.rank0_bytes / (self.write_mb_per_s * 1e6)

    @property
    def slim_s(self) -> float:
        return self.slim_bytes / (self.write_mb_per_s * 1e6)

    @property
    def margin_s(self) -> int:
        """Seconds before --time at which the job must be warned."""
        return math.ceil(self.step_s + self.save_s + self.slim_s + self.slack_s)

    @property
    def barrier_timeout_s(self) -> int:
        """The process group's timeout: covers a save `barrier_factor` times slower than estimated."""
        return max(BARRIER_FLOOR_S, math.ceil(self.barrier_factor * self.save_s))

    def lines(self) -> list[str]:
        return [
            f"allocation end: Slurm warns {self.margin_s} s before --time = the slowest step {self.step_s:.0f} s "
            f"({self.step_source}) + its save {self.save_s:.0f} s ({self.rank0_bytes / 1e9:.1f} GB written by rank 0 "
            f"at {self.write_mb_per_s:g} MB/s, {self.speed_source}) + {self.slim_s:.0f} s slimming the save that "
            f"leaves the newest kept ({self.slim_bytes / 1e9:.1f} GB read and written) + {self.slack_s:.0f} s of "
            "Slurm timer slack",
            f"save barrier: the process group waits {self.barrier_timeout_s} s ({DIST_TIMEOUT_ENV}, passed by the "
            f"plugin: verl's own nccl_timeout does not reach the FSDP workers' group, whose torch default is 600 s); "
            f"that covers a save up to {self.barrier_timeout_s / max(self.save_s, 1e-9):.0f}x slower than estimated",
        ]


def write_speed() -> tuple[float, str]:
    """(MB/s, where the figure comes from): the user's measured REPRO_WRITE_MB_PER_S, else the catalog's."""
    raw = os.environ.get(WRITE_SPEED_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = 0.0
        if value > 0:
            return value, f"{WRITE_SPEED_ENV}"
    setting = catalog.gpu_node().write_mb_per_s
    return float(setting.value), f"assumed; set {WRITE_SPEED_ENV} to yours"


def largest_param_count() -> int:
    """A model of unknown size (the generic backbone) is sized as the catalog's largest."""
    return max(b.param_count or 0 for b in catalog.backbones().values())


def allocation_end(
    backbone: str,
    save_contents: list[str],
    ranks: int,
    params: int | None = None,
    model_dtype: object = DEFAULT_MODEL_DTYPE,
) -> AllocationEnd:
    """The allocation end of a GPU cell of `backbone` saving `save_contents` (verl's actor.checkpoint) over
    `ranks` FSDP ranks, its FSDP weights in `model_dtype` (the actor's fsdp_config); `params` defaults to the
    backbone's catalog count."""
    node = catalog.gpu_node()
    step = node.step_for(backbone)
    if params is None:
        params = catalog.get_backbone(backbone).param_count or largest_param_count()
    sharded = sharded_bytes(save_contents, model_dtype)
    rank0 = params * sharded // max(1, ranks) + params * hf_bytes(save_contents)
    slim = params * _SLIM_BYTES if "hf_model" in save_contents else 0
    speed, speed_source = write_speed()
    return AllocationEnd(
        backbone=backbone,
        step_s=float(step.value),
        step_source=step.source.split(";")[0],
        rank0_bytes=int(rank0),
        slim_bytes=int(slim),
        write_mb_per_s=speed,
        speed_source=speed_source,
        slack_s=float(node.signal_slack_s.value),
        barrier_factor=float(node.barrier_factor.value),
    )


def parse_list(value: str) -> list[str]:
    """A Hydra list override's value (`[model,optimizer,extra,hf_model]`) as names."""
    return [part.strip().strip("'\"") for part in value.strip().strip("[]").split(",") if part.strip()]


def from_overrides(backbone: str, overrides: list[str]) -> AllocationEnd:
    """The allocation end of a cell from its verl override list (save_contents, nodes x GPUs, model_dtype)."""
    values = override_values(overrides)
    contents = parse_list(values.get("actor_rollout_ref.actor.checkpoint.save_contents", "[model,optimizer,extra]"))
    ranks = int(values.get("trainer.nnodes", 1)) * int(values.get("trainer.n_gpus_per_node", 8))
    dtype = values.get(MODEL_DTYPE_KEY, DEFAULT_MODEL_DTYPE).strip("'\"")
    return allocation_end(backbone, contents, ranks, model_dtype=dtype)
