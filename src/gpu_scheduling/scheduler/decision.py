"""Where a pod goes, or why it cannot go anywhere. Pure: works on plain pod and node dicts, no client.

The scheduler trusts the map (that is its contract) but never binds to a node a kubelet would refuse or that
the cluster operator has fenced off: unknown, NotReady, cordoned or tainted NoSchedule/NoExecute without a
matching toleration, or one the pod does not fit as kube-scheduler judges it (scheduler.fit: resources against the
node's other pods, pod count, host ports, nodeSelector and required node affinity).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from gpu_scheduling import constants, gpumap, podrequest
from gpu_scheduling.scheduler import fit
from gpu_scheduling.text import json_type


@dataclasses.dataclass(frozen=True)
class Bind:
    node: str
    entry: gpumap.Entry


@dataclasses.dataclass(frozen=True)
class Unschedulable:
    """The pod stays Pending. `node` is the node it waits for (None when only a pod change can help)."""

    message: str
    node: str | None = None


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


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' rule: effect empty or equal; key empty with Exists matches all; Equal compares values."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def node_problem(node: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> str | None:
    """Why a pod with `tolerations` cannot run on `node` now, or None when it can."""
    name = node["metadata"]["name"]
    conditions = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready")
    if ready is None or ready.get("status") != "True":
        why = f" ({ready.get('reason')})" if ready and ready.get("reason") else ""
        return f"node {name} is not Ready{why}"
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and not any(toleration_matches(t, CORDON_TAINT) for t in tolerations):
        return f"node {name} is cordoned (spec.unschedulable=true)"
    for taint in spec.get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(toleration_matches(t, taint) for t in tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return (
                f"node {name} has taint {taint.get('key')}{value}:{taint.get('effect')} that the pod does not tolerate"
            )
    return None


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
    {"volumes", "securityContext", "dnsPolicy", "dnsConfig", "enableServiceLinks", "imagePullSecrets", "hostAliases"}
)
"""What no decision reads of a pod's spec."""


def pod_view(pod: dict[str, Any]) -> dict[str, Any]:
    """What the scheduler keeps of its own pods (its pods informer's transform): the pod without what no decision
    reads (volumes, images, commands, probes, mounts, security contexts; managed fields; of the status only the phase
    and the PodScheduled condition), so thousands of waiting pods and every bound one cost as little memory as
    their decisions allow. Fields it does not know are kept: a reader added later is never silently starved.
    tests/unit/scheduler/test_decision.py checks every reader answers the same on the view as on the whole pod."""
    out = dict(pod)
    meta = pod.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    spec = pod.get("spec")
    if isinstance(spec, dict):
        view = {k: v for k, v in spec.items() if k not in _UNREAD_POD_SPEC_FIELDS}
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
        kept: dict[str, Any] = {k: status[k] for k in ("phase",) if k in status}
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


CORDON_TAINT: Mapping[str, str] = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
"""A pod that tolerates this taint may go to a cordoned node (kube-scheduler's NodeUnschedulable), as DaemonSet
pods do."""


def pod_fit(pod: Mapping[str, Any]) -> fit.Want | str:
    """The pod's side of the fit rules, or why it cannot be judged: a required rule gpu-scheduler does not support,
    or a field that cannot be read."""
    try:
        return fit.unsupported(pod) or fit.want(pod)
    except fit.FitError as exc:
        return str(exc)


def is_claim_pod(pod: Mapping[str, Any]) -> bool:
    """The pod has a `gpu.scheduling/claim` annotation (whatever its value; podrequest.read checks it).
    Never raises: metadata or annotations of the wrong shape are not a claim pod (decide reports them)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and constants.CLAIM_ANNOTATION in annotations


def _tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list):
        raise podrequest.PodRequestError(f"spec.tolerations is {json_type(tolerations)}; expected an array")
    for i, t in enumerate(tolerations):
        if not isinstance(t, Mapping):
            raise podrequest.PodRequestError(f"spec.tolerations[{i}] is {json_type(t)}; expected an object")
        for field in ("key", "operator", "value", "effect"):
            if t.get(field) is not None and not isinstance(t[field], str):
                raise podrequest.PodRequestError(
                    f"spec.tolerations[{i}].{field} is {json_type(t[field])}; expected a string"
                )
    return tolerations


def decide(
    pod: Mapping[str, Any],
    nodes: Mapping[str, Mapping[str, Any]],
    isolated: bool,
    usage: fit.NodeUsage,
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
        tolerations = _tolerations(pod)
    except gpumap.PodMapError as exc:
        return Unschedulable(str(exc))
    wanted = pod_fit(pod)
    if isinstance(wanted, str):
        return Unschedulable(f"{wanted} (map entry {entry.index})")
    node = nodes.get(entry.node)
    if node is None:
        return Unschedulable(
            f"node {entry.node} from map entry {entry.index}={entry.node}:{entry.cuda_visible_devices} does not exist",
            node=entry.node,
        )
    problem = node_problem(node, tolerations) or fit.problem(wanted, node, usage)
    if problem:
        return Unschedulable(f"{problem} (map entry {entry.index})", node=entry.node)
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
