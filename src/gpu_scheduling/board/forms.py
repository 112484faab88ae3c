"""The board's create form: a decoded JSON body in, the Kubernetes objects to create out. Pure: no client, no I/O.

A form (the page sends it as JSON to /api/preview and /api/create) asks for one workload:

    {"kind": "claim", "namespace": "default", "name": "demo-1", "count": 1, "policy": "contiguous",
     "preferIds": [0, 1], "exclusivity": "Exclusive", "topologyMode": "Ignore", "minBandwidthGBps": 0,
     "selector": {"gpu-type": "a100"}, "strategy": "", "minMemoryMiB": 0}
    {"kind": "statefulset", "namespace": "default", "name": "demo-ss", "replicas": 2, "map": "0=node1:0\\n1=node2:1"}

A claim becomes a GpuClaim `<name>` and a pod `<name>` naming it; a statefulset a StatefulSet `<name>` whose pod
template carries the map. Every object, and the StatefulSet's pod template, carries `BOARD_CREATED_LABEL` and
`BOARD_WORKLOAD_LABEL`, which is how the board lists and deletes what it made and nothing else. The pods run
`pod_image` as a restricted pod (non-root, read-only root filesystem, no capabilities, RuntimeDefault seccomp, no
privilege escalation) with `NODE_NAME` from `spec.nodeName`, as the check service expects.

The form comes from a browser, so every field is checked here before anything reaches the apiserver, and every
problem is collected (not only the first), each naming its field, what it got and what was expected. Numbers may
come as JSON integers or as decimal strings (an `<input>`'s value); `preferIds` as an array or a comma list,
`selector` as an object or a `k=v,k=v` list; an empty string is an absent optional field. Keys of the other kind
are ignored (the page may send every input of the form); a key the form does not know is refused.

A non-empty `preferIds` with policy `contiguous` (or none) becomes the GpuClaim policy `preferIds`, which takes the
preferred ids that are free and fills up like `contiguous`; with `spread` it is refused (spread would ignore them).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpu_scheduling import constants, gpumap, names, text

#: Form keys common to both kinds, and each kind's own.
COMMON_KEYS: Final = ("kind", "namespace", "name")
CLAIM_KEYS: Final = (
    "count",
    "policy",
    "preferIds",
    "exclusivity",
    "topologyMode",
    "minBandwidthGBps",
    "selector",
    "strategy",
    "minMemoryMiB",
)
STATEFULSET_KEYS: Final = ("replicas", "map")
KINDS: Final = ("claim", "statefulset")

POLICIES: Final = constants.POLICIES
EXCLUSIVITIES: Final = tuple(e for e in constants.EXCLUSIVITIES if e != "MIG")  # the scheduler refuses MIG
TOPOLOGY_MODES: Final = tuple(sorted(constants.TOPOLOGY_MODES))  # as the page's select lists them

MAX_COUNT: Final = 64  # GPUs of one claim: more than any node has
MAX_REPLICAS: Final = 64  # pods of one StatefulSet made from the page
MAX_GPU_ID: Final = 10**gpumap.MAX_GPU_ID_DIGITS - 1  # as the map's ids
MAX_BANDWIDTH_GBPS: Final = 1_000_000
MAX_MEMORY_MIB: Final = 2**31 - 1  # the CRD's integer; no GPU comes near
MAX_SELECTOR_LABELS: Final = 16
#: A StatefulSet's name is at most 52 characters: its pods' `controller-revision-hash` label value is
#: `<name>-<10 characters>` and a label value is at most 63.
MAX_STATEFULSET_NAME: Final = 52
MAX_NAME: Final = names.MAX_LABEL  # a DNS label (pod names become hostnames)
MAX_STRING: Final = 1024  # any single-line field; the map is bounded by gpumap itself and the body size
SHOWN_CHARS: Final = text.SHOWN_CHARS  # user text quoted in a message is cut to this many characters

_INT_TEXT_RE = re.compile(r"^[0-9]{1,12}$")

CONTAINER_NAME: Final = "check"
RUN_AS_USER: Final = 1000  # the check image's user (images/check/Dockerfile)


class FormError(Exception):
    """The form cannot be turned into objects. `status` is the HTTP answer (422: a field is wrong; 403: the
    namespace is not one the board may create in), `field` the first field at fault, `problems` every
    (field, message) found."""

    def __init__(self, problems: Sequence[tuple[str, str]], status: int = 422) -> None:
        assert problems
        self.problems = list(problems)
        self.status = status
        self.field, self.message = self.problems[0]
        super().__init__(self.message)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the board's flags decide about the objects: the scheduler they name, the image their pods run and the
    namespaces the form may use."""

    scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME
    pod_image: str = "gpu-scheduler-check:latest"
    namespaces: tuple[str, ...] = ("default",)


@dataclasses.dataclass(frozen=True)
class Object:
    """One object to create: `resource` is its plural ("gpuclaims", "pods", "statefulsets"), `body` the object."""

    resource: str
    kind: str
    name: str
    body: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one form asks for: its objects in the order they must be created (a claim before the pod naming it)."""

    kind: str
    namespace: str
    name: str
    objects: tuple[Object, ...]


# ---- reading fields -------------------------------------------------------------------------------------------


class _Problems:
    """Problems in field order; a field whose value is wrong is read as absent, so later checks go on."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def add(self, field: str, message: str) -> None:
        self.found.append((field, message))


def _absent(value: Any) -> bool:
    return value is None or value == ""


def _integer(form: Mapping[str, Any], key: str, low: int, high: int, default: int | None, p: _Problems) -> int | None:
    """An integer from `low` to `high`, as a JSON integer or a decimal string; `default` when absent (None: the
    field is required)."""
    value = form.get(key)
    expected = f"{key} must be an integer from {low} to {high}"
    if _absent(value):
        if default is None:
            p.add(key, f"{expected}, got nothing")
        return default
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INT_TEXT_RE.match(value.strip()):
        number = int(value.strip())
    if number is None or not low <= number <= high:
        p.add(key, f"{expected}, got {_shown(value)}")
        return None
    return number


def _choice(form: Mapping[str, Any], key: str, choices: Sequence[str], default: str | None, p: _Problems) -> str | None:
    value = form.get(key)
    if _absent(value):
        if default is None:
            p.add(key, f"{key} must be one of {', '.join(choices)}, got nothing")
        return default
    if not isinstance(value, str) or value not in choices:
        p.add(key, f"{key} must be one of {', '.join(choices)}, got {_shown(value)}")
        return None
    return value


def _dns_label(form: Mapping[str, Any], key: str, limit: int, p: _Problems) -> str | None:
    value = form.get(key)
    if _absent(value):
        p.add(key, f"{key} is required: a DNS label ({names.label_rule(limit)})")
        return None
    if not names.is_label(value, limit):
        p.add(key, f"{key} must be a DNS label ({names.label_rule(limit)}), got {_shown(value)}")
        return None
    return value


def _shown(value: Any) -> str:
    """A value quoted for a message, bounded and escaped whatever it is: a string as JSON (cut to SHOWN_CHARS), a
    number or literal as JSON writes it, an object or array by its type."""
    if isinstance(value, str):
        return json.dumps(value[:SHOWN_CHARS]) + ("…" if len(value) > SHOWN_CHARS else "")
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of {value.bit_length()} bits"  # str() of it could raise past 4300 digits
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return text.json_type(value)


def _prefer_ids(form: Mapping[str, Any], p: _Problems) -> list[int]:
    value = form.get("preferIds")
    if _absent(value):
        return []
    items: list[Any]
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            p.add("preferIds", f"preferIds is {len(value)} characters long; at most {MAX_STRING}")
            return []
        items = [item.strip() for item in value.split(",")]
    elif isinstance(value, list):
        items = value
    else:
        p.add("preferIds", f'preferIds must be a list of GPU ids such as [0, 1] or "0,1", got {_shown(value)}')
        return []
    if len(items) > MAX_COUNT:
        p.add("preferIds", f"preferIds names {len(items)} GPUs; at most {MAX_COUNT}")
        return []
    ids: list[int] = []
    for item in items:
        number = None
        if isinstance(item, int) and not isinstance(item, bool):
            number = item
        elif isinstance(item, str) and _INT_TEXT_RE.match(item):
            number = int(item)
        if number is None or not 0 <= number <= MAX_GPU_ID:
            p.add("preferIds", f"preferIds must be GPU ids from 0 to {MAX_GPU_ID}, got {_shown(item)}")
            return []
        if number in ids:
            p.add("preferIds", f"preferIds names GPU {number} twice")
            return []
        ids.append(number)
    return ids


def _label_key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes label key (`[prefix/]name`), or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and not names.is_subdomain(prefix):
        return f"the prefix {_shown(prefix)} is not a DNS subdomain"
    if not names.is_label_name(name):
        return f"{_shown(name)} is not a label name ({names.LABEL_NAME_RULE})"
    return None


def _selector(form: Mapping[str, Any], p: _Problems) -> dict[str, str]:
    value = form.get("selector")
    if _absent(value):
        return {}
    pairs: list[tuple[Any, Any]]
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            p.add("selector", f"selector is {len(value)} characters long; at most {MAX_STRING}")
            return {}
        pairs = []
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            if "=" not in item:
                p.add("selector", f"selector entries must be key=value, got {_shown(item)}")
                return {}
            k, _, v = item.partition("=")
            pairs.append((k.strip(), v.strip()))
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        p.add("selector", f"selector must be an object of node labels or a list k=v,k=v, got {_shown(value)}")
        return {}
    if len(pairs) > MAX_SELECTOR_LABELS:
        p.add("selector", f"selector has {len(pairs)} labels; at most {MAX_SELECTOR_LABELS}")
        return {}
    labels: dict[str, str] = {}
    for k, v in pairs:
        if not isinstance(k, str) or not k:
            p.add("selector", f"selector keys must be label keys, got {_shown(k)}")
            return {}
        problem = _label_key_problem(k)
        if problem:
            p.add("selector", f"selector key {_shown(k)}: {problem}")
            return {}
        if not isinstance(v, str):
            p.add("selector", f"selector value of {_shown(k)} must be a string, got {_shown(v)}")
            return {}
        if v and not names.is_label_name(v):
            p.add(
                "selector", f"selector value {_shown(v)} of {_shown(k)} is not a label value ({names.LABEL_NAME_RULE})"
            )
            return {}
        if k in labels:
            p.add("selector", f"selector names {_shown(k)} twice")
            return {}
        labels[k] = v
    return labels


def _gpu_map(form: Mapping[str, Any], replicas: int | None, p: _Problems) -> str | None:
    value = form.get("map")
    if _absent(value):
        p.add("map", f"map is required: one line per pod, {gpumap.EXPECTED_FORM}")
        return None
    if not isinstance(value, str):
        p.add("map", f"map must be a string, one line per pod ({gpumap.EXPECTED_FORM}), got {_shown(value)}")
        return None
    try:
        parsed = gpumap.parse(value)
    except gpumap.MapError as exc:
        p.add("map", str(exc))
        return None
    if replicas is not None:
        missing = [i for i in range(replicas) if i not in parsed.entries]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", …" if len(missing) > 10 else "")
            p.add(
                "map",
                f"the map has no entry for pod index {shown} of {replicas} replicas; every index from 0 to "
                f"{replicas - 1} needs a line",
            )
            return None
    # The annotation as the user wrote it would do; the encoded form is canonical and shows what was understood.
    return gpumap.encode(parsed)


# ---- building objects -----------------------------------------------------------------------------------------


def labels(name: str) -> dict[str, str]:
    """The labels of every object the board creates for workload `name`."""
    return {constants.BOARD_CREATED_LABEL: constants.BOARD_NAME, constants.BOARD_WORKLOAD_LABEL: name}


def selector(name: str) -> str:
    """The label selector of workload `name`'s objects (what DELETE removes)."""
    return f"{constants.BOARD_CREATED_LABEL}={constants.BOARD_NAME},{constants.BOARD_WORKLOAD_LABEL}={name}"


def pod_spec(settings: Settings) -> dict[str, Any]:
    """A restricted pod running the check image, reading its node from the downward API."""
    return {
        "schedulerName": settings.scheduler_name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": settings.pod_image,
                "imagePullPolicy": "IfNotPresent",
                "env": [{"name": constants.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                "securityContext": {
                    "runAsNonRoot": True,
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ],
    }


def _claim(form: Mapping[str, Any], namespace: str, name: str, settings: Settings, p: _Problems) -> Workload:
    count = _integer(form, "count", 1, MAX_COUNT, None, p)
    policy = _choice(form, "policy", POLICIES, "contiguous", p)
    prefer = _prefer_ids(form, p)
    exclusivity = _choice(form, "exclusivity", EXCLUSIVITIES, "Exclusive", p)
    mode = _choice(form, "topologyMode", TOPOLOGY_MODES, "Ignore", p)
    bandwidth = _integer(form, "minBandwidthGBps", 0, MAX_BANDWIDTH_GBPS, 0, p)
    node_labels = _selector(form, p)
    strategy = _choice(form, "strategy", constants.STRATEGIES, "", p)
    memory = _integer(form, "minMemoryMiB", 0, MAX_MEMORY_MIB, 0, p)
    if prefer:
        if policy == "spread":
            p.add("preferIds", "preferIds needs policy contiguous or preferIds; spread would ignore them")
        elif policy is not None:
            policy = "preferIds"
    elif policy == "preferIds":
        p.add("policy", "policy preferIds needs preferIds, e.g. [0, 1]")
    if mode == "Ignore" and bandwidth:
        p.add("minBandwidthGBps", "minBandwidthGBps needs topologyMode Preferred or Required (Ignore ignores it)")
    if p.found:
        raise FormError(p.found)
    devices: dict[str, Any] = {"count": count, "policy": policy, "exclusivity": exclusivity}
    if prefer:
        devices["preferIds"] = prefer
    if memory:
        devices["minMemoryMiB"] = memory
    spec: dict[str, Any] = {"devices": devices}
    if mode != "Ignore":
        spec["topology"] = {"mode": mode, "minBandwidthGBps": bandwidth}
    if node_labels:
        spec["selector"] = {"matchLabels": node_labels}
    if strategy:
        spec["strategy"] = strategy
    meta = {"name": name, "namespace": namespace, "labels": labels(name)}
    claim = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.GPU_CLAIM_KIND,
        "metadata": meta,
        "spec": spec,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": dict(meta, labels=labels(name), annotations={constants.CLAIM_ANNOTATION: name}),
        "spec": pod_spec(settings),
    }
    return Workload(
        "claim",
        namespace,
        name,
        (
            Object(constants.GPU_CLAIM_PLURAL, constants.GPU_CLAIM_KIND, name, claim),
            Object("pods", "Pod", name, pod),
        ),
    )


def _statefulset(form: Mapping[str, Any], namespace: str, name: str, settings: Settings, p: _Problems) -> Workload:
    replicas = _integer(form, "replicas", 1, MAX_REPLICAS, None, p)
    gpu_map = _gpu_map(form, replicas, p)
    if p.found:
        raise FormError(p.found)
    assert replicas is not None and gpu_map is not None
    body = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(name)},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            # All pods at once: the board shows where each lands, and a pending one does not hold up the others.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels(name)},
            "template": {
                "metadata": {"labels": labels(name), "annotations": {constants.MAP_ANNOTATION: gpu_map}},
                "spec": pod_spec(settings),
            },
        },
    }
    return Workload("statefulset", namespace, name, (Object("statefulsets", "StatefulSet", name, body),))


def check_namespace(namespace: Any, settings: Settings) -> str:
    """`namespace` when the board may create there; FormError 422 when it is not a namespace name, 403 naming the
    allowed ones when it is another."""
    p = _Problems()
    value = _dns_label({"namespace": namespace}, "namespace", MAX_NAME, p)
    if value is None:
        raise FormError(p.found)
    if value not in settings.namespaces:
        raise FormError(
            [
                (
                    "namespace",
                    f"the board may not create in namespace {value!r}; it may in {', '.join(settings.namespaces)}",
                )
            ],
            status=403,
        )
    return value


def build(form: Any, settings: Settings) -> Workload:
    """The objects `form` asks for. Raises FormError (422 naming the fields at fault; 403 for a namespace the
    board may not create in, checked before any other field so that a refusal says so first)."""
    if not isinstance(form, dict):
        raise FormError([("body", f"the body must be a JSON object (the form), got {text.json_type(form)}")])
    namespace = check_namespace(form.get("namespace"), settings)
    p = _Problems()
    known = set(COMMON_KEYS) | set(CLAIM_KEYS) | set(STATEFULSET_KEYS)
    for key in form:
        if key not in known:
            p.add(str(key)[:60], f"unknown field {_shown(key)}; the form has {', '.join(sorted(known))}")
            break
    kind = _choice(form, "kind", KINDS, None, p)
    limit = MAX_STATEFULSET_NAME if kind == "statefulset" else MAX_NAME
    name = _dns_label(form, "name", limit, p)
    if kind is None or name is None:
        # Check the fields of the kind we can guess anyway, so that one answer lists all problems.
        if kind == "statefulset":
            _integer(form, "replicas", 1, MAX_REPLICAS, None, p)
        raise FormError(p.found)
    if kind == "claim":
        return _claim(form, namespace, name, settings, p)
    return _statefulset(form, namespace, name, settings, p)
