"""`kubectl gpu generate-template`: a commented GpuClaim and a pod that names it, which `kubectl gpu submit`
accepts as written. Pure."""

from __future__ import annotations

import json

from gpu_scheduling import constants, names

DEFAULT_NAME = "gpu-workload"
DEFAULT_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
POLICIES = tuple(p for p in constants.POLICIES if p != "preferIds")  # the template names no ids to prefer


def render(
    name: str = DEFAULT_NAME,
    gpus: int = 1,
    strategy: str | None = None,
    policy: str = "contiguous",
    image: str = DEFAULT_IMAGE,
    scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME,
) -> str:
    """The template's text; ValueError for a name, count, strategy or policy the API would refuse."""
    if not names.is_label(name):
        raise ValueError(f"--name {name!r} is not a valid name ({names.label_rule()})")
    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    if strategy is not None and strategy not in constants.STRATEGIES:
        raise ValueError(f"--strategy {strategy!r} is not one of {', '.join(constants.STRATEGIES)}")
    if policy not in POLICIES:
        raise ValueError(f"--policy {policy!r} is not one of {', '.join(POLICIES)}")
    if not image or any(c.isspace() for c in image):
        raise ValueError(f"--image {image!r} is not an image reference")
    q = json.dumps  # a YAML-safe quoted scalar for a value given by the user
    strategy_lines: list[tuple[str, str]] = (
        [(f"  strategy: {strategy}", "BestFit packs, LeastUtilized spreads, RoundRobin takes turns")]
        if strategy
        else [("  # strategy: BestFit", "BestFit | LeastUtilized | RoundRobin; unset: the cluster's default")]
    )
    lines: list[tuple[str, str]] = [
        ("# A GPU workload for the gpu-scheduler: a GpuClaim (which GPUs) and a pod that names it.", ""),
        ("# `kubectl gpu submit <this file>` applies both (the claim first); `kubectl gpu claims -o wide`", ""),
        ("# and `kubectl gpu watch` follow them.", ""),
        (f"apiVersion: {constants.API_VERSION}", ""),
        (f"kind: {constants.GPU_CLAIM_KIND}", ""),
        ("metadata:", ""),
        (f"  name: {name}", ""),
        ("spec:", ""),
        ("  devices:", ""),
        (f"    count: {gpus}", "GPUs, all on one node"),
        (f"    policy: {policy}", "contiguous: adjacent ids; spread: across NVLink islands"),
        ("    exclusivity: Exclusive", "Exclusive: this claim's alone; Shared: with Shared claims only"),
        ("    # minMemoryMiB: 16384", "free memory each GPU must have"),
        ("  # topology: {mode: Preferred, minBandwidthGBps: 600}", "Required | Preferred | Ignore"),
        ("  # selector: {matchLabels: {gpu-type: a100}}", "only nodes with these labels"),
        *strategy_lines,
        ("---", ""),
        ("apiVersion: v1", ""),
        ("kind: Pod", ""),
        ("metadata:", ""),
        (f"  name: {name}", ""),
        ("  annotations:", ""),
        (f"    {constants.CLAIM_ANNOTATION}: {name}", "the GpuClaim above (same namespace)"),
        ("spec:", ""),
        (f"  schedulerName: {scheduler_name}", "the GPU scheduler binds it once its claim has GPUs"),
        ("  restartPolicy: Never", ""),
        ("  containers:", ""),
        ("    - name: main", ""),
        (f"      image: {q(image)}", ""),
        ("      # CUDA_VISIBLE_DEVICES is set to the claim's GPUs (the gpu-webhook, from the allocation).", ""),
        ('      command: ["sh", "-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; nvidia-smi -L"]', ""),
    ]
    width = max(len(code) for code, comment in lines if comment) + 2
    return "".join(f"{code.ljust(width)}# {comment}\n" if comment else f"{code}\n" for code, comment in lines)
