"""What GPUs a node has, from a simulated declaration, and the GpuNodeStatus status the agent writes. Pure (NVML
is read in `agent.nvml`).

A simulated inventory is declared as comma-separated `key=value` parts, each optional:

- `count=8`: that many GPUs, ids 0..count-1 (default 0, at most MAX_GPUS);
- `islands=2`: split into that many equal NVLink islands, ids in order (default 1);
- `bandwidth=600/64`: the islands' bandwidths in GB/s, by island in order, the last one repeating (default 0);
- `unhealthy=7`: the ids that report Unhealthy (`/`-separated; default none);
- `memory=81920`: MiB of memory per GPU, by id in order, the last one repeating (default 81920, an 80 GB GPU, so
  that every simulated GPU reports its memory; 1..MAX_MEMORY_MIB);
- `used=0/20480`: MiB of that memory in use per GPU, by id, the last one repeating (default 0; never more than the
  GPU's memory);
- `utilization=10/50/90`: percent of the last sample period each GPU was busy, by id, the last one repeating
  (default 0; 0..100).

Per-GPU values are plain decimal integers; values past the last GPU are not used (as bandwidths past the last
island).

The reference's example node is exactly `count=8,islands=2,bandwidth=600/64,unhealthy=7`; a node of four 40 GB GPUs,
the first idle, the others half full and busy, is `count=4,memory=40960,used=0/20480,utilization=0/75`. An unhealthy
GPU keeps its memory and the use declared for it but reports bandwidth 0 and utilization 0 (it runs nothing).

A declaration is user input (anyone who may annotate the node writes it), so it is bounded: at most MAX_DECLARATION
characters and MAX_GPUS GPUs, every value checked, and read in one pass over the text. A bad one raises
InventoryError quoting the offending part and saying what was expected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpu_scheduling.claims import occupancy

#: The agent's default declaration (nodes without the annotation constants.SIMULATED_ANNOTATION): 8 GPUs, 0-3 in
#: one NVLink island at 600 GB/s, 4-7 in another at 64 GB/s, all healthy, each with the default 80 GB of memory,
#: none of it used, idle. The memory and utilization defaults stay implicit, so that this string (the chart's
#: agent.simulatedInventory and the test-bed's) reads as the reference's example does.
DEFAULT_SIMULATED = "count=8,islands=2,bandwidth=600/64,unhealthy="

#: Longest declaration read: a node annotation is user input, and its parse (and the error quoting it) stays small.
MAX_DECLARATION = 4096
#: Most GPUs one declaration may give a node (the status the agent writes grows with it).
MAX_GPUS = 1024
#: MiB of memory of a simulated GPU without `memory=`: an 80 GB GPU (H100, A100 80GB).
DEFAULT_MEMORY_MIB = 81920
#: Largest memory or use one simulated GPU may declare: 16 TiB, far above any GPU and far below the int64 the API
#: stores, so no declaration makes the agent's write fail.
MAX_MEMORY_MIB = 16 * 1024 * 1024

_KEYS = ("count", "islands", "bandwidth", "unhealthy", "memory", "used", "utilization")


class InventoryError(ValueError):
    """A simulated declaration that cannot be read; the message names the part and what was expected."""


def _per_gpu(part: str, value: str, count: int, low: int, high: int, what: str) -> list[int]:
    """The `/`-separated values of one per-GPU part for GPU ids 0..count-1, the last value repeating. Plain ASCII
    digits only (int() would also take signs, `_` and other scripts' digits, none of which a declaration means)."""
    values = []
    for token in (t.strip() for t in value.split("/")):
        # Eight digits hold any allowed value; a longer token is refused before int() reads it.
        if not (token.isascii() and token.isdigit() and len(token) <= 8 and low <= int(token) <= high):
            key = part.partition("=")[0].strip()
            raise InventoryError(
                f"{part!r}: expected {key}=<{what}> per GPU id in order, integers {low}..{high} separated by / "
                "(the last one repeats)"
            )
        values.append(int(token))
    return [values[min(gpu, len(values) - 1)] for gpu in range(count)]


def parse_simulated(text: str) -> list[dict[str, Any]]:
    """The devices of the simulated declaration `text` (see the module's docstring), in id order."""
    if len(text) > MAX_DECLARATION:
        raise InventoryError(
            f"a declaration of {len(text)} characters ({text[:40]!r}...): expected at most {MAX_DECLARATION}"
        )
    fields: dict[str, str] = {}
    parts: dict[str, str] = {}  # each key's part as written, for the messages
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _KEYS:
            raise InventoryError(
                f"{part!r}: expected count=N, islands=N, bandwidth=A/B, unhealthy=I/J, memory=MiB/MiB, used=MiB/MiB "
                "or utilization=P/P"
            )
        fields[key.strip()] = value.strip()
        parts[key.strip()] = part
    try:
        count = int(fields.get("count", "0"))
        islands = max(1, int(fields.get("islands", "1")))
        bandwidths = [int(b) for b in fields.get("bandwidth", "0").split("/") if b]
        unhealthy = {int(i) for i in fields.get("unhealthy", "").replace(";", "/").split("/") if i}
    except ValueError as exc:
        raise InventoryError(f"{text!r}: {exc}; expected integers as in {DEFAULT_SIMULATED!r}") from None
    if count < 0 or not bandwidths:
        raise InventoryError(f"{text!r}: count must be >= 0 and at least one bandwidth given")
    if count > MAX_GPUS:
        raise InventoryError(f"{parts['count']!r}: expected at most {MAX_GPUS} GPUs")
    if min(bandwidths) < 0:
        raise InventoryError(f"{parts['bandwidth']!r}: expected bandwidths in GB/s, integers >= 0")
    memory = _per_gpu(
        parts.get("memory", "memory"), fields.get("memory", str(DEFAULT_MEMORY_MIB)), count, 1, MAX_MEMORY_MIB, "MiB"
    )
    used = _per_gpu(parts.get("used", "used"), fields.get("used", "0"), count, 0, MAX_MEMORY_MIB, "MiB")
    utilization = _per_gpu(
        parts.get("utilization", "utilization"), fields.get("utilization", "0"), count, 0, 100, "percent"
    )
    per_island = max(1, -(-count // islands))
    devices = []
    for gpu in range(count):
        if used[gpu] > memory[gpu]:
            raise InventoryError(
                f"{parts['used']!r}: GPU {gpu} would use {used[gpu]} MiB of its {memory[gpu]} MiB; expected at most "
                "its memory"
            )
        island = gpu // per_island
        sick = gpu in unhealthy
        devices.append(
            {
                "id": gpu,
                "health": "Unhealthy" if sick else "Healthy",
                "island": f"nvlink-group-{island}",
                "bandwidthGBps": 0 if sick else bandwidths[min(island, len(bandwidths) - 1)],
                "memoryTotalMiB": memory[gpu],
                "memoryUsedMiB": used[gpu],
                "utilizationPercent": 0 if sick else utilization[gpu],
            }
        )
    return devices


def islands_from_links(count: int, links: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Connected components of the NVLink graph: GPU id -> island number (smallest id of its component first)."""
    parent = list(range(count))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in links:
        if 0 <= a < count and 0 <= b < count:
            parent[max(find(a), find(b))] = min(find(a), find(b))
    roots = sorted({find(i) for i in range(count)})
    return {i: roots.index(find(i)) for i in range(count)}


def simulated_status(spec: str = DEFAULT_SIMULATED) -> dict[str, Any]:
    """The GpuNodeStatus status of a node with the simulated inventory `spec`, none of its GPUs in use (what the
    agent writes for such a node, and what the tests and the benchmark write where no agent runs)."""
    return node_status(parse_simulated(spec), ())


def node_status(
    devices: list[dict[str, Any]],
    leases: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    kubelet: Mapping[int, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The GpuNodeStatus status: the devices as read (health, island, bandwidth, and memory and utilization where
    the GPU reports them) with inUseBy (the pods holding each GPU, "<namespace>/<name>" where known, replacing any
    inUseBy the devices had) as the occupancy model counts them (claims.occupancy, what the board and kubectl gpu
    show) from the node's GPU Leases and the pods bound to it (map entries, allocations), and the counts. With the
    kubelet's view (`kubelet`: GPU -> pods, from gpu-device-plugin), each device also says which pods the kubelet
    gave a device of it to (`kubeletPods`)."""
    by_key, by_uid = occupancy.read_pods(pods)
    # The pods are those bound to this node and the Leases this node's: the model's node name plays no part. A pod
    # whose allocation names another node than the one it is bound to holds nothing here.
    model = occupancy.node(
        "",
        None,
        (p for _, p in sorted(by_key.items()) if p.hold is not None and p.hold.node == p.node),
        [lease for lease in map(occupancy.read_lease, leases) if lease is not None],
        by_uid.get,
    )
    # A Lease holder no pod here has is written as the Lease names it, else by its uid.
    users = {
        gpu.id: {h.uid if h.known is None and h.pod == f"uid:{h.uid}" else h.pod for h in gpu.holders}
        for gpu in model.gpus
    }
    out = [dict(d, inUseBy=sorted(users.get(d["id"], ()))) for d in devices]
    if kubelet is not None:
        for d in out:
            d["kubeletPods"] = list(kubelet.get(d["id"], ()))
    unhealthy = sum(1 for d in out if d["health"] != "Healthy")
    free = sum(1 for d in out if d["health"] == "Healthy" and not d["inUseBy"])
    return {"total": len(out), "free": free, "unhealthy": unhealthy, "devices": out}
