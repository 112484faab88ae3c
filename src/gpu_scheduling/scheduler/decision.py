"""Where a pod goes, or why it cannot go anywhere. Pure: works on plain pod and node dicts, no client.

The scheduler trusts the map (that is its contract) but never binds to a node a kubelet would refuse or that
the cluster operator has fenced off: unknown, NotReady, cordoned or tainted NoSchedule/NoExecute without a
matching toleration, or one the pod does not fit as kube-scheduler judges it (the rules of scheduler.plugins:
resources against the node's other pods, pod count, host ports, nodeSelector and required node affinity).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from gpu_scheduling import constants, gpumap, podrequest
from gpu_scheduling.scheduler import fit, framework, plugins
from gpu_scheduling.scheduler.plugins import node_ready, node_unschedulable, taint_toleration
from gpu_scheduling.text import json_type


@dataclasses.dataclass(frozen=True)
class Bind:
    node: str
    entry: gpumap.Entry


@dataclasses.dataclass(frozen=True)
class Unschedulable:
    """The pod stays Pending. `node` is the node it waits for (None when only a pod change can help), and `wakes`
    the kinds of change of that node that can help it (the refusing rule's `Plugin.wakes_on`)."""

    message: str
    node: str | None = None
    wakes: frozenset[str] = frozenset()


Decision = Bind | Unschedulable


def is_schedulable_pod(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """Unbound, not terminating, not finished, not held by a scheduling gate, and ours."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return (
        spec.get("schedulerName") == scheduler_name
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and phase not in ("Succeeded", "Failed")
        and not is_gated(pod)
    )


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Held by a scheduling gate (spec.schedulingGates): not to be tried until whoever set the gates (a queue such as
    Kueue) removes the last one, as kube-scheduler does; the apiserver refuses the Binding of a gated pod anyway."""
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def is_finished(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: the pod's containers will not run again, so it holds no GPU."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def node_problem(node: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> str | None:
    """Why a pod with `tolerations` cannot run on `node` now (not Ready, cordoned, or a taint it does not
    tolerate: plugins.NODE_STATE), or None when it can."""
    refusal = (
        node_ready.refusal(node)
        or node_unschedulable.refusal(node, node_unschedulable.tolerates_cordon(tolerations))
        or taint_toleration.refusal(node, tolerations)
    )
    return refusal() if refusal is not None else None


def node_view(node: dict[str, Any]) -> dict[str, Any]:
    """What the scheduler's decisions read of a Node (node_problem, the fit rules, node affinity), and no more: the
    nodes informer keeps this. Its heartbeats (condition times), images, addresses and the other conditions are
    dropped, so an update of those alone reaches the scheduler as no change (`same_node`).
    tests/unit/scheduler/test_decision.py checks every reader answers the same on the view as on the whole Node."""
    meta = _object(node.get("metadata"))
    status = _object(node.get("status"))
    conditions = status.get("conditions")
    conditions = conditions if isinstance(conditions, list) else []
    ready = [
        {k: c[k] for k in ("type", "status", "reason") if k in c}
        for c in conditions
        if isinstance(c, dict) and c.get("type") == "Ready"
    ]
    view_status: dict[str, Any] = {"conditions": ready}
    if "allocatable" in status:
        view_status["allocatable"] = status["allocatable"]
    return {
        "metadata": {
            k: meta[k] for k in ("name", "uid", "resourceVersion", "labels", "deletionTimestamp") if k in meta
        },
        "spec": node.get("spec"),
        "status": view_status,
    }


_UNREAD_CONTAINER_FIELDS = frozenset(
    {
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "workingDir",
        "volumeMounts",
        "volumeDevices",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "securityContext",
        "stdin",
        "stdinOnce",
        "tty",
        "envFrom",
    }
)
"""What no decision reads of a container (its name, env, resources, ports and restartPolicy are read)."""

_UNREAD_POD_SPEC_FIELDS = frozenset(
    {"securityContext", "dnsPolicy", "dnsConfig", "enableServiceLinks", "imagePullSecrets", "hostAliases"}
)
"""What no decision reads of a pod's spec (of its volumes only the claims are kept: fit.claim_volumes)."""


def pod_view(pod: dict[str, Any]) -> dict[str, Any]:
    """What the scheduler keeps of its own pods (its pods informer's transform): the pod without what no decision
    reads (volumes other than claims, images, commands, probes, mounts, security contexts; managed fields; of the
    status only the phase, start, nominated node and PodScheduled condition), so thousands of waiting pods and every
    bound one cost as little memory as their decisions allow. Fields it does not know are kept: a reader added later
    is never silently starved.
    tests/unit/scheduler/test_decision.py checks every reader answers the same on the view as on the whole pod."""
    out = dict(pod)
    meta = pod.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    spec = pod.get("spec")
    if isinstance(spec, dict):
        view = {k: v for k, v in spec.items() if k not in _UNREAD_POD_SPEC_FIELDS}
        if isinstance(spec.get("volumes"), list):
            view["volumes"] = fit.claim_volumes(spec["volumes"])
        for field in ("initContainers", "containers"):
            listed = spec.get(field)
            if isinstance(listed, list):
                view[field] = [
                    {k: v for k, v in c.items() if k not in _UNREAD_CONTAINER_FIELDS} if isinstance(c, dict) else c
                    for c in listed
                ]
        view.pop("ephemeralContainers", None)
        out["spec"] = view
    status = pod.get("status")
    if isinstance(status, dict):
        conditions = status.get("conditions")
        kept: dict[str, Any] = {k: status[k] for k in ("phase", "startTime", "nominatedNodeName") if k in status}
        if isinstance(conditions, list):
            kept["conditions"] = [c for c in conditions if isinstance(c, dict) and c.get("type") == "PodScheduled"]
        out["status"] = kept
    return out


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def same_node(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Two `node_view`s that differ in nothing but their resourceVersion: no pod can be helped by the update."""
    if old is None:
        return False

    def unversioned(view: Mapping[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in view["metadata"].items() if k != "resourceVersion"}
        return {**view, "metadata": meta}

    return unversioned(old) == unversioned(new)


def cycle(pod: Mapping[str, Any], snap: framework.Snapshot) -> framework.Cycle | str:
    """The pod's attempt over the profile's rules (its PreFilters run), or why it cannot be judged: a required rule
    gpu-scheduler does not support, or a field that cannot be read."""
    prepared = framework.prepare(pod, snap, plugins.PROFILE)
    return prepared.message if isinstance(prepared, framework.PodRefusal) else prepared


def asks_for_domains(pod: Mapping[str, Any]) -> bool:
    """The pod has required pod affinity or anti-affinity, or a DoNotSchedule topology spread constraint: rules
    whose verdict other nodes' pods can change. Never raises (a field it cannot read: False)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping) and any(
        isinstance(affinity.get(kind), Mapping) and affinity[kind].get("requiredDuringSchedulingIgnoredDuringExecution")
        for kind in ("podAffinity", "podAntiAffinity")
    ):
        return True
    spread = spec.get("topologySpreadConstraints")
    return isinstance(spread, list) and any(
        isinstance(c, Mapping) and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule" for c in spread
    )


def is_claim_pod(pod: Mapping[str, Any]) -> bool:
    """The pod has a `gpu.scheduling/claim` annotation (whatever its value; podrequest.read checks it).
    Never raises: metadata or annotations of the wrong shape are not a claim pod (decide reports them)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and constants.CLAIM_ANNOTATION in annotations


def _tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    try:
        return taint_toleration.tolerations(pod)
    except ValueError as exc:
        raise podrequest.PodRequestError(str(exc)) from None


def decide(
    pod: Mapping[str, Any],
    nodes: Mapping[str, Mapping[str, Any]],
    isolated: bool,
    usage: fit.NodeUsage | framework.Snapshot,
    maps: gpumap.ParseCache | None = None,
) -> Decision:
    """Decide for one schedulable map pod given the current nodes (name -> node) and what their pods take (`usage`).
    Claim pods go through scheduler.claims instead.

    Never raises for any shape of `pod`: what cannot be read (see :func:`podrequest.read`) is Unschedulable
    with the reason. A map pod is bound only when every container and init container has the
    CUDA_VISIBLE_DEVICES its map entry gives (the webhook sets it at creation; a map added afterwards would
    run the pod on GPUs it does not see, or on every GPU of the node); `isolated` as gpu-webhook's --isolated-gpus."""
    if not isinstance(pod, Mapping):
        return Unschedulable(f"the pod is {json_type(pod)}; expected an object")
    try:
        asked = podrequest.read(pod.get("metadata"), maps)
        if isinstance(asked, podrequest.ClaimRequest):
            return Unschedulable(f"pod names the GpuClaim {asked.name}; it is placed by the claim path, not by a map")
        if asked is None:
            return Unschedulable(
                f"pod has no {constants.MAP_ANNOTATION} annotation; the gpu-scheduler places pods only by their map "
                "entry"
            )
        entry = asked.entry
        missing = podrequest.missing_cuda(pod, entry, isolated)
        if missing:
            return Unschedulable(missing)
        _tolerations(pod)
    except gpumap.PodMapError as exc:
        return Unschedulable(str(exc))
    snap = usage if isinstance(usage, framework.Snapshot) else framework.Snapshot(usage)
    attempt = cycle(pod, snap)
    if isinstance(attempt, str):
        return Unschedulable(f"{attempt} (map entry {entry.index})")
    node = nodes.get(entry.node)
    if node is None:
        return Unschedulable(
            f"node {entry.node} from map entry {entry.index}={entry.node}:{entry.cuda_visible_devices} does not exist",
            node=entry.node,
            wakes=frozenset({framework.NODE}),
        )
    refused = attempt.refusal(node)
    if refused is not None:
        plugin, reason = refused
        return Unschedulable(f"{reason()} (map entry {entry.index})", node=entry.node, wakes=plugin.wakes_on)
    return Bind(entry.node, entry)


def created_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod was created (seconds since the epoch, from its RFC 3339 creationTimestamp), or None when absent
    or unreadable."""
    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
