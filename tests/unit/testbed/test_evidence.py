"""evidence/ is the take-home's deliverable, written by the verify phase of `make demo`
(roles/verify/tasks/evidence.yml): `kubectl get pod -o wide -A` and the logs of the check pods on verify_log_nodes.
It must show what the deploy phase installs today, not what it installed when the file was last written.

What is expected is worked out from the sources at test time, as a run would: the chart rendered by the real helm
(harness/manifests.py) with the values roles/deploy gives it (its deploy_values, evaluated as Ansible does with the
inventory's group_vars and the role's defaults), the take-home's StatefulSet of roles/deploy/templates/check.yaml.j2,
and kind's own pods (kind_workloads). Then, per namespace:

- every Deployment has `replicas` pods of one ReplicaSet, every DaemonSet one pod on each node it can run on (the
  workers, and the control plane when it tolerates its taint), the StatefulSet exactly the pods 0..replicas-1, each
  on the node the take-home map gives its index (the NODE column);
- every pod listed belongs to one of those workloads;
- every pod is Running with all its containers ready (READY n/n, n the containers of the pod template);
- evidence/logs/ holds the log of exactly the check pods on verify_log_nodes, each showing, in at least two reports,
  the node and the CUDA_VISIBLE_DEVICES of the map's entry for that pod.

SAMPLE_PODS is a hand-made `kubectl get pod -o wide -A` of a correct run (a real run's, corrected by hand to today's
workloads): the checks pass on it, and each kind of stale or broken evidence made from it fails with its own message.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import jinja2
import pytest
import yaml

from gpu_scheduling import gpumap
from harness import manifests
from tests import ROOT

EVIDENCE = ROOT / "evidence"
POD_LIST = "kubectl-get-pod-owide-A.txt"
DEPLOY = ROOT / "roles" / "deploy"
VERIFY_DEFAULTS = ROOT / "roles" / "verify" / "defaults" / "main.yml"
#: A caBundle the chart's schema accepts (the deploy role passes roles/webhook_tls's CA here).
CA_VALUES = manifests.CHART / "ci" / "webhook-existing-secret-values.yaml"
#: The programs whose images roles/app_images hands over to roles/deploy.
PROGRAMS = ("scheduler", "webhook", "check", "agent", "board")
#: The characters of the random and hashed suffixes Kubernetes gives generated names (k8s.io/apimachinery's
#: rand.SafeEncodeString): a Deployment's pod is <deployment>-<pod-template-hash>-<5>, a DaemonSet's <daemonset>-<5>.
SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
#: kind's control-plane taint, which a DaemonSet's pods stay off unless they tolerate it.
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"


@dataclasses.dataclass(frozen=True)
class Workload:
    """What should own pods in the cluster: a Deployment, DaemonSet or StatefulSet, or a static pod (`Static`,
    named <name>-<node> by the kubelet)."""

    namespace: str
    kind: str
    name: str
    #: Deployment and StatefulSet: pods expected.
    replicas: int = 0
    #: Containers each pod reports in READY (its containers and its sidecar init containers); None: any n/n.
    containers: int | None = None
    #: DaemonSet: the nodes it runs on (all of them, exactly once); Static: its node.
    nodes: frozenset[str] = frozenset()
    #: DaemonSet with a node selector or required node affinity: some of `nodes`, at least one.
    some_nodes: bool = False
    #: Where it comes from, for messages.
    source: str = ""

    def owns(self, pod: str) -> re.Match[str] | None:
        name = re.escape(self.name)
        pattern = {
            "Deployment": rf"{name}-(?P<hash>{SAFE}{{1,10}})-{SAFE}{{5}}",
            "DaemonSet": rf"{name}-{SAFE}{{5}}",
            "StatefulSet": rf"{name}-(?P<index>0|[1-9][0-9]*)",
            "Static": "|".join(rf"{name}-{re.escape(n)}" for n in sorted(self.nodes)),
        }[self.kind]
        return re.fullmatch(pattern, pod)


@dataclasses.dataclass(frozen=True)
class Pod:
    """One row of `kubectl get pod -o wide -A`."""

    namespace: str
    name: str
    ready: str
    status: str
    node: str


# ---- What the test-bed deploys ---------------------------------------------------------------------------------------


def _load(path: pathlib.Path) -> dict[str, Any]:
    loaded: dict[str, Any] = (yaml.safe_load(path.read_text()) if path.exists() else None) or {}
    return loaded


@functools.cache
def run_variables() -> dict[str, Any]:
    """The variables of a `make demo` run as the deploy and verify roles see them: role defaults, then the
    inventory's group_vars over them, then the deploy role's vars (Ansible's precedence), each Jinja expression
    evaluated as Ansible does once what it names is known (those that need Ansible itself, a lookup, stay out).
    What other roles hand over is stood in for: the images (names do not matter here) and the webhook's CA."""
    pending = {
        **_load(VERIFY_DEFAULTS),
        **_load(DEPLOY / "defaults" / "main.yml"),
        **_load(manifests.GROUP_VARS),
        **_load(DEPLOY / "vars" / "main.yml"),
    }
    known: dict[str, Any] = {
        "testbed_facts_repo": str(ROOT),
        "testbed_keys": dict(manifests.keys()),
        "app_images_refs": {p: f"localhost:5001/{p}:evidence" for p in PROGRAMS},
        "app_images_repositories": {p: p for p in PROGRAMS},
        "app_images_tags": dict.fromkeys(PROGRAMS, "evidence"),
        "webhook_tls_ca_bundle": _load(CA_VALUES)["webhook"]["tls"]["caBundle"],
        "webhook_tls_checksum": "0",
    }
    return manifests.evaluate(pending, known)


def _ready_containers(pod_spec: Mapping[str, Any]) -> int:
    """READY's n: the pod's containers and its sidecars (init containers with restartPolicy Always)."""
    sidecars = [c for c in pod_spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return len(pod_spec["containers"]) + len(sidecars)


def _daemonset_nodes(pod_spec: Mapping[str, Any], workers: Iterable[str], control_plane: str) -> frozenset[str]:
    """The nodes a DaemonSet's pods can run on in the kind cluster: the workers (untainted), and the control plane
    when they tolerate its NoSchedule taint."""
    tolerated = any(
        (t.get("operator") == "Exists" and not t.get("key")) or t.get("key") == CONTROL_PLANE_TAINT
        for t in pod_spec.get("tolerations") or []
    )
    return frozenset([*workers, control_plane] if tolerated else workers)


def _selects_nodes(pod_spec: Mapping[str, Any]) -> bool:
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    return bool(pod_spec.get("nodeSelector")) or "requiredDuringSchedulingIgnoredDuringExecution" in affinity


def _role_template(name: str, variables: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A template of roles/deploy rendered as Ansible's template lookup does (trim_blocks)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(DEPLOY / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        keep_trailing_newline=True,
    )
    return [doc for doc in yaml.safe_load_all(env.get_template(name).render(**variables)) if doc]


@functools.cache
def deployed() -> tuple[tuple[str, dict[str, Any]], ...]:
    """The documents the deploy phase applies, each with where it comes from: the chart as roles/deploy installs it
    (deploy_values, in testbed_system_namespace), then the take-home's check.yaml.j2."""
    v = run_variables()
    namespace = v["testbed_system_namespace"]
    chart = manifests.render(v["deploy_values"], namespace=namespace)
    for doc in chart:
        doc.setdefault("metadata", {}).setdefault("namespace", namespace)
    check = _role_template("check.yaml.j2", v)
    return (
        *(("charts/gpu-scheduler", doc) for doc in chart),
        *(("roles/deploy/templates/check.yaml.j2", doc) for doc in check),
    )


def nodes() -> tuple[list[str], str]:
    """The kind cluster's worker node names and its control plane's (kind names it <cluster>-control-plane)."""
    v = run_variables()
    return list(v["testbed_worker_nodes"]), f"{v['testbed_cluster_name']}-control-plane"


def kind_workloads(cni: str) -> list[Workload]:
    """kind's own pods, which no role of the project deploys: the control plane's static pods, coredns, kube-proxy,
    the CNI and the local-path provisioner."""
    workers, control_plane = nodes()
    everywhere = frozenset([*workers, control_plane])
    static = [
        Workload("kube-system", "Static", c, nodes=frozenset([control_plane]), source="kind (kubeadm static pod)")
        for c in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ]
    return [
        *static,
        Workload("kube-system", "Deployment", "coredns", replicas=2, source="kind (kubeadm)"),
        Workload("kube-system", "DaemonSet", "kube-proxy", nodes=everywhere, source="kind (kubeadm)"),
        Workload("kube-system", "DaemonSet", cni, nodes=everywhere, source="kind (its node image's CNI)"),
        Workload("local-path-storage", "Deployment", "local-path-provisioner", replicas=1, source="kind"),
    ]


#: kind's CNI: testbed-netd in the offline node image (images/kind-netd), kindnet in kindest/node (online path).
KIND_CNIS = ("testbed-netd", "kindnet")


def deployed_workloads() -> list[Workload]:
    """The Deployments, DaemonSets and StatefulSets of the chart and of check.yaml.j2."""
    workers, control_plane = nodes()
    found = []
    for source, doc in deployed():
        if doc["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        spec = doc["spec"]["template"]["spec"]
        found.append(
            Workload(
                namespace=doc["metadata"]["namespace"],
                kind=doc["kind"],
                name=doc["metadata"]["name"],
                replicas=doc["spec"].get("replicas", 1) if doc["kind"] != "DaemonSet" else 0,
                containers=_ready_containers(spec),
                nodes=_daemonset_nodes(spec, workers, control_plane) if doc["kind"] == "DaemonSet" else frozenset(),
                some_nodes=_selects_nodes(spec),
                source=source,
            )
        )
    return found


def check_map() -> gpumap.GpuMap:
    return gpumap.parse(run_variables()["testbed_check_map"])


def isolated_gpus() -> bool:
    """Whether the chart's webhook numbers a container's GPUs from 0 (--isolated-gpus), rather than giving the
    map's ids."""
    (webhook,) = [d for _, d in deployed() if d["kind"] == "Deployment" and d["metadata"]["name"] == _webhook_name()]
    return "--isolated-gpus" in webhook["spec"]["template"]["spec"]["containers"][0].get("args", [])


def _webhook_name() -> str:
    name: str = run_variables()["deploy_values"]["webhook"]["name"]
    return name


# ---- Reading the evidence ------------------------------------------------------------------------------------------


def pod_table(text: str) -> list[Pod]:
    """The rows of `kubectl get pod -o wide -A`, by the columns of its header (a cell may hold spaces: RESTARTS
    `1 (72m ago)`; a header name too: NOMINATED NODE)."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "the pod list is empty"
    columns = [(m.group(), m.start()) for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    names = [c for c, _ in columns]
    needed = ["NAMESPACE", "NAME", "READY", "STATUS", "NODE"]
    assert all(n in names for n in needed), f"the header {lines[0]!r} lacks {needed} (`kubectl get pod -o wide -A`)"
    bounds = [(name, start, end) for (name, start), (_, end) in zip(columns, [*columns[1:], ("", None)], strict=True)]
    rows = []
    for line in lines[1:]:
        cells = {name: line[start:end].strip() for name, start, end in bounds}
        rows.append(Pod(cells["NAMESPACE"], cells["NAME"], cells["READY"], cells["STATUS"], cells["NODE"]))
    return rows


def _owner(pod: Pod, workloads: list[Workload]) -> tuple[Workload, re.Match[str]] | str:
    found = [(w, m) for w in workloads if w.namespace == pod.namespace and (m := w.owns(pod.name))]
    if len(found) == 1:
        return found[0]
    if not found:
        return f"{pod.namespace}/{pod.name} belongs to no workload the test-bed deploys (nor to kind)"
    return f"{pod.namespace}/{pod.name} could belong to any of {[w.name for w, _ in found]}"


def workload_problems(workload: Workload, pods: list[tuple[Pod, re.Match[str]]]) -> list[str]:
    """What is wrong with one workload's pods: how many, where, which."""
    what = f"{workload.kind} {workload.namespace}/{workload.name} ({workload.source})"
    found = []
    if workload.kind == "Deployment":
        if len(pods) != workload.replicas:
            found.append(f"{what}: {len(pods)} pods, expected {workload.replicas} (its replicas)")
        if len({m["hash"] for _, m in pods}) > 1:
            found.append(f"{what}: pods of several ReplicaSets {sorted(p.name for p, _ in pods)} (a rollout)")
    elif workload.kind == "DaemonSet":
        on = [p.node for p, _ in pods]
        twice = sorted({n for n in on if on.count(n) > 1})
        if twice:
            found.append(f"{what}: more than one pod on {twice}")
        if workload.some_nodes:
            if not on or not set(on) <= workload.nodes:
                found.append(f"{what}: pods on {sorted(on)}, expected at least one, on {sorted(workload.nodes)}")
        elif set(on) != workload.nodes:
            found.append(f"{what}: pods on {sorted(set(on))}, expected one on each of {sorted(workload.nodes)}")
    elif workload.kind == "StatefulSet":
        indices = sorted(int(m["index"]) for _, m in pods)
        if indices != list(range(workload.replicas)):
            found.append(f"{what}: pods {indices}, expected exactly 0..{workload.replicas - 1} (its replicas)")
        entries = check_map().entries if workload.name == run_variables()["testbed_check_name"] else {}
        for pod, m in pods:
            entry = entries.get(int(m["index"]))
            if entry is not None and pod.node != entry.node:
                found.append(
                    f"{what}: {pod.name} runs on {pod.node!r}, the map puts index {entry.index} on {entry.node}"
                )
    elif not pods:
        found.append(f"{what}: no pod on {sorted(workload.nodes)}")
    return found


def pod_problems(pod: Pod, workload: Workload | None) -> list[str]:
    """A pod that is not Running, or not ready in every container its workload's pod template has."""
    found = []
    if pod.status != "Running":
        found.append(f"{pod.namespace}/{pod.name} is {pod.status}, not Running")
    ready = re.fullmatch(r"(\d+)/(\d+)", pod.ready)
    if not ready or ready[1] != ready[2] or int(ready[2]) == 0:
        found.append(f"{pod.namespace}/{pod.name} READY {pod.ready}, expected n/n")
    elif workload is not None and workload.containers is not None and int(ready[2]) != workload.containers:
        found.append(
            f"{pod.namespace}/{pod.name} READY {pod.ready}: its {workload.kind} {workload.name} has "
            f"{workload.containers} containers ({workload.source})"
        )
    return found


def log_problems(evidence: pathlib.Path) -> list[str]:
    """evidence/logs/ holds exactly the logs the verify role saves (the check pods on verify_log_nodes), each with
    the node and CUDA_VISIBLE_DEVICES of the map's entry, in at least two reports."""
    v = run_variables()
    entries = check_map().entries
    expected = {
        f"{v['testbed_check_name']}-{i}": e
        for i, e in entries.items()
        if e.node in v["verify_log_nodes"] and i < int(v["testbed_check_replicas"])
    }
    logs = evidence / "logs"
    present = {p.stem for p in logs.glob("*.txt")} if logs.is_dir() else set()
    found = [
        f"logs/{name}.txt is missing (its pod runs on {expected[name].node})"
        for name in sorted(expected)
        if name not in present
    ]
    found += [f"logs/{name}.txt: the verify role saves no such log" for name in sorted(present - set(expected))]
    for name in sorted(present & set(expected)):
        entry, text = expected[name], (logs / f"{name}.txt").read_text()
        cuda = entry.cuda_value(isolated_gpus())
        node_lines = re.findall(r"^Node Name: (.*)$", text, re.MULTILINE)
        cuda_lines = re.findall(r"^CUDA_VISIBLE_DEVICES: (.*)$", text, re.MULTILINE)
        if len(node_lines) < 2 or len(cuda_lines) < 2:
            found.append(f"logs/{name}.txt: {len(node_lines)} reports, expected at least two")
        if set(node_lines) - {entry.node}:
            found.append(f"logs/{name}.txt: Node Name {sorted(set(node_lines))}, the map says {entry.node}")
        if set(cuda_lines) - {cuda}:
            found.append(f"logs/{name}.txt: CUDA_VISIBLE_DEVICES {sorted(set(cuda_lines))}, the map says {cuda}")
    return found


def problems(evidence: pathlib.Path) -> list[str]:
    """Everything wrong with an evidence folder, against what the test-bed deploys; empty when it is right."""
    pods = pod_table((evidence / POD_LIST).read_text())
    names = {p.name for p in pods if p.namespace == "kube-system"}
    cnis = [c for c in KIND_CNIS if any(re.fullmatch(rf"{c}-{SAFE}{{5}}", n) for n in names)]
    found: list[str] = []
    if len(cnis) != 1:
        found.append(f"kube-system: pods of {cnis or 'none'} of kind's CNIs {list(KIND_CNIS)}, expected one")
    workloads = deployed_workloads() + kind_workloads(cnis[0] if cnis else KIND_CNIS[0])
    owned: dict[Workload, list[tuple[Pod, re.Match[str]]]] = {w: [] for w in workloads}
    for pod in pods:
        owner = _owner(pod, workloads)
        if isinstance(owner, str):
            found.append(owner)
            found += pod_problems(pod, None)
        else:
            owned[owner[0]].append((pod, owner[1]))
            found += pod_problems(pod, owner[0])
    for workload in workloads:
        found += workload_problems(workload, owned[workload])
    return found + log_problems(evidence)


# ---- The evidence in the repository --------------------------------------------------------------------------------


def test_the_evidence_shows_what_the_deploy_phase_installs():
    """evidence/ as committed: regenerate it with `make demo` when the workloads change."""
    found = problems(EVIDENCE)
    assert not found, "evidence/ is not what `make demo` writes today (run it again):\n" + "\n".join(found)


# ---- The checks themselves, on a correct sample and broken copies of it --------------------------------------------

#: `kubectl get pod -o wide -A` (its columns up to NODE; NOMINATED NODE and READINESS GATES are <none>) after a
#: correct `make demo`: a real run's, with the board's pod and the agent's second container (its device plugin) as
#: the deploy phase has them now.
COLUMNS = ("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES")
CP = "gpu-cluster-control-plane"
SAMPLE_PODS = [
    ("default", "gpu-scheduler-check-0", "1/1", "Running", "0", "4m18s", "10.244.3.108", "node1"),
    ("default", "gpu-scheduler-check-1", "1/1", "Running", "0", "4m21s", "10.244.4.102", "node2"),
    ("default", "gpu-scheduler-check-2", "1/1", "Running", "0", "4m23s", "10.244.1.124", "node3"),
    ("default", "gpu-scheduler-check-3", "1/1", "Running", "0", "4m25s", "10.244.2.108", "node4"),
    ("default", "gpu-scheduler-check-4", "1/1", "Running", "0", "4m27s", "10.244.2.107", "node4"),
    ("kube-system", "coredns-66bc5c9577-4rchs", "1/1", "Running", "0", "73m", "10.244.0.2", CP),
    ("kube-system", "coredns-66bc5c9577-7xsh2", "1/1", "Running", "0", "73m", "10.244.0.3", CP),
    ("kube-system", "cuda-env-webhook-76bcdb576f-chsqj", "1/1", "Running", "0", "19s", "10.244.4.115", "node2"),
    ("kube-system", "cuda-env-webhook-76bcdb576f-nzp4q", "1/1", "Running", "0", "19s", "10.244.1.138", "node3"),
    ("kube-system", f"etcd-{CP}", "1/1", "Running", "0", "74m", "172.18.0.4", CP),
    ("kube-system", "gpu-board-7d9f8b6c4-xk2lp", "1/1", "Running", "0", "19s", "10.244.2.129", "node4"),
    ("kube-system", "gpu-inventory-agent-9xlw6", "2/2", "Running", "0", "19s", "10.244.3.122", "node1"),
    ("kube-system", "gpu-inventory-agent-dh5ld", "2/2", "Running", "0", "19s", "10.244.2.128", "node4"),
    ("kube-system", "gpu-inventory-agent-ljkm9", "2/2", "Running", "0", "19s", "10.244.4.116", "node2"),
    ("kube-system", "gpu-inventory-agent-vn8ml", "2/2", "Running", "0", "19s", "10.244.1.140", "node3"),
    ("kube-system", "gpu-scheduler-5cb8d4f89f-5clv4", "1/1", "Running", "0", "19s", "10.244.1.139", "node3"),
    ("kube-system", "gpu-scheduler-5cb8d4f89f-qjtpn", "1/1", "Running", "0", "19s", "10.244.3.123", "node1"),
    ("kube-system", f"kube-apiserver-{CP}", "1/1", "Running", "0", "74m", "172.18.0.4", CP),
    ("kube-system", f"kube-controller-manager-{CP}", "1/1", "Running", "0", "74m", "172.18.0.4", CP),
    ("kube-system", "kube-proxy-bd7kr", "1/1", "Running", "0", "73m", "172.18.0.3", "node1"),
    ("kube-system", "kube-proxy-jjv4t", "1/1", "Running", "0", "73m", "172.18.0.5", "node3"),
    ("kube-system", "kube-proxy-qbzgb", "1/1", "Running", "0", "73m", "172.18.0.4", CP),
    ("kube-system", "kube-proxy-wkbxv", "1/1", "Running", "0", "73m", "172.18.0.6", "node2"),
    ("kube-system", "kube-proxy-xm8jz", "1/1", "Running", "0", "73m", "172.18.0.2", "node4"),
    ("kube-system", f"kube-scheduler-{CP}", "1/1", "Running", "0", "74m", "172.18.0.4", CP),
    ("kube-system", "testbed-netd-5mqgm", "1/1", "Running", "0", "73m", "172.18.0.5", "node3"),
    ("kube-system", "testbed-netd-92djx", "1/1", "Running", "0", "73m", "172.18.0.4", CP),
    ("kube-system", "testbed-netd-djm5n", "1/1", "Running", "0", "73m", "172.18.0.2", "node4"),
    ("kube-system", "testbed-netd-mp4m9", "1/1", "Running", "0", "73m", "172.18.0.6", "node2"),
    ("kube-system", "testbed-netd-wd2hp", "1/1", "Running", "0", "73m", "172.18.0.3", "node1"),
    (
        "local-path-storage",
        "local-path-provisioner-98cfff879-mbzwk",
        "1/1",
        "Running",
        "1 (72m ago)",
        "73m",
        "10.244.0.4",
        CP,
    ),
]
#: The check pods' logs the verify role saves (those on node3 and node4): their node and CUDA_VISIBLE_DEVICES.
SAMPLE_LOGS = {
    "gpu-scheduler-check-2": ("node3", "0,1,2"),
    "gpu-scheduler-check-3": ("node4", "3"),
    "gpu-scheduler-check-4": ("node4", "3"),
}


def kubectl_table(rows: Iterable[Iterable[str]]) -> str:
    """Rows laid out as kubectl prints them (text/tabwriter: each column as wide as its widest cell plus 3
    spaces, at least 6; the last one not padded)."""
    table = [list(COLUMNS), *([*row, "<none>", "<none>"] for row in rows)]
    widths = [max(6, *(len(r[i]) + 3 for r in table)) for i in range(len(COLUMNS) - 1)]
    return "".join("".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + r[-1] + "\n" for r in table)


def report(node: str, cuda: str, times: int = 2) -> str:
    """`times` reports of gpu-scheduler-check (src/gpu_scheduling/check.py)."""
    return f"Node Name: {node}\nCUDA_VISIBLE_DEVICES: {cuda}\n---\n" * times


@dataclasses.dataclass
class Sample:
    """An evidence folder to break: its pods (rows of SAMPLE_PODS) and its logs (name -> text)."""

    pods: list[list[str]]
    logs: dict[str, str]

    def drop(self, pod: str) -> None:
        assert any(row[1] == pod for row in self.pods), f"the sample has no pod {pod}"
        self.pods = [row for row in self.pods if row[1] != pod]

    def set(self, pod: str, **cells: str) -> None:
        """Change cells of a pod's row, by column name in lowercase (name, ready, status, node)."""
        (row,) = [row for row in self.pods if row[1] == pod]
        for column, value in cells.items():
            row[COLUMNS.index(column.upper())] = value

    def add(self, *row: str) -> None:
        self.pods.append(list(row))

    def write(self, folder: pathlib.Path) -> pathlib.Path:
        (folder / "logs").mkdir()
        (folder / POD_LIST).write_text(kubectl_table(self.pods))
        for name, text in self.logs.items():
            (folder / "logs" / f"{name}.txt").write_text(text)
        return folder


@pytest.fixture
def sample() -> Sample:
    """A correct evidence folder's contents."""
    return Sample([list(row) for row in SAMPLE_PODS], {n: report(*v) for n, v in SAMPLE_LOGS.items()})


def test_the_sample_is_what_the_deploy_phase_installs(sample, tmp_path):
    """The checks pass on a correct run's evidence (so a failure on evidence/ is the evidence's, not theirs)."""
    assert problems(sample.write(tmp_path)) == []


def test_the_table_is_read_by_its_columns():
    """The columns are found from the header, as kubectl aligns them: a cell with spaces (RESTARTS `1 (72m ago)`)
    or a header name with one (NOMINATED NODE) does not shift the columns after it; the committed file reads the
    same way."""
    pods = {p.name: p for p in pod_table(kubectl_table(SAMPLE_PODS))}
    assert len(pods) == len(SAMPLE_PODS)
    name = "local-path-provisioner-98cfff879-mbzwk"
    assert pods[name] == Pod("local-path-storage", name, "1/1", "Running", CP)
    committed = pod_table((EVIDENCE / POD_LIST).read_text())
    assert committed and all(p.namespace and p.name and p.ready and p.status and p.node for p in committed)
    assert {p.name for p in committed} >= {f"etcd-{CP}", "gpu-scheduler-check-0"}


def test_the_expected_workloads_follow_the_chart_and_the_role():
    """What the sources say is deployed: the chart's scheduler, webhook, board and agent (two containers: the
    device plugin), and the take-home's StatefulSet of five replicas."""
    by_name = {w.name: w for w in deployed_workloads()}
    assert set(by_name) == {
        "gpu-scheduler",
        "cuda-env-webhook",
        "gpu-board",
        "gpu-inventory-agent",
        "gpu-scheduler-check",
    }
    assert by_name["gpu-inventory-agent"].containers == 2
    assert by_name["gpu-inventory-agent"].nodes == {"node1", "node2", "node3", "node4"}
    assert (by_name["gpu-scheduler-check"].namespace, by_name["gpu-scheduler-check"].replicas) == ("default", 5)


BOARD_POD = "gpu-board-7d9f8b6c4-xk2lp"
WEBHOOK_POD = "cuda-env-webhook-76bcdb576f-nzp4q"


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        pytest.param(
            lambda s: s.drop(BOARD_POD),
            "Deployment kube-system/gpu-board (charts/gpu-scheduler): 0 pods, expected 1 (its replicas)",
            id="board-missing",
        ),
        pytest.param(
            lambda s: s.set("gpu-inventory-agent-9xlw6", ready="1/1"),
            "kube-system/gpu-inventory-agent-9xlw6 READY 1/1: its DaemonSet gpu-inventory-agent has 2 containers",
            id="agent-without-its-device-plugin",
        ),
        pytest.param(
            lambda s: s.drop("gpu-inventory-agent-dh5ld"),
            "DaemonSet kube-system/gpu-inventory-agent (charts/gpu-scheduler): pods on ['node1', 'node2', 'node3'], "
            "expected one on each of ['node1', 'node2', 'node3', 'node4']",
            id="agent-off-a-node",
        ),
        pytest.param(
            lambda s: s.add("kube-system", "gpu-inventory-agent-x2z4q", "2/2", "Running", "0", "1m", "10.0.0.9", CP),
            "DaemonSet kube-system/gpu-inventory-agent (charts/gpu-scheduler): pods on",
            id="agent-on-the-control-plane",
        ),
        pytest.param(
            lambda s: s.set("gpu-scheduler-check-2", node="node2"),
            "gpu-scheduler-check-2 runs on 'node2', the map puts index 2 on node3",
            id="check-pod-on-the-wrong-node",
        ),
        pytest.param(
            lambda s: s.drop("gpu-scheduler-check-4"),
            "pods [0, 1, 2, 3], expected exactly 0..4 (its replicas)",
            id="check-pod-missing",
        ),
        pytest.param(
            lambda s: s.set("gpu-scheduler-check-0", name="gpu-scheduler-check-5"),
            "pods [1, 2, 3, 4, 5], expected exactly 0..4 (its replicas)",
            id="check-pod-out-of-range",
        ),
        pytest.param(
            lambda s: s.set(WEBHOOK_POD, ready="0/1", status="Pending"),
            f"kube-system/{WEBHOOK_POD} is Pending, not Running",
            id="pod-not-running",
        ),
        pytest.param(
            lambda s: s.set(WEBHOOK_POD, ready="0/1"),
            f"kube-system/{WEBHOOK_POD} READY 0/1, expected n/n",
            id="pod-not-ready",
        ),
        pytest.param(
            lambda s: s.set(WEBHOOK_POD, name="cuda-env-webhook-5d8c9b7f4-nzp4q"),
            "Deployment kube-system/cuda-env-webhook (charts/gpu-scheduler): pods of several ReplicaSets",
            id="rollout-in-progress",
        ),
        pytest.param(
            lambda s: s.add("default", "leftover-7f9c4d8b5-bcdfg", "1/1", "Running", "0", "1m", "10.0.0.9", "node1"),
            "default/leftover-7f9c4d8b5-bcdfg belongs to no workload the test-bed deploys (nor to kind)",
            id="foreign-pod",
        ),
        pytest.param(
            lambda s: s.drop(f"etcd-{CP}"),
            "Static kube-system/etcd (kind (kubeadm static pod)): no pod",
            id="static-pod-missing",
        ),
        pytest.param(
            lambda s: s.drop("kube-proxy-qbzgb"),
            "DaemonSet kube-system/kube-proxy (kind (kubeadm)): pods on",
            id="kind-daemonset-off-a-node",
        ),
        pytest.param(
            lambda s: s.add("kube-system", "kindnet-bcdfg", "1/1", "Running", "0", "1m", "172.18.0.2", "node1"),
            "kube-system: pods of ['testbed-netd', 'kindnet'] of kind's CNIs",
            id="two-cnis",
        ),
        pytest.param(
            lambda s: s.logs.pop("gpu-scheduler-check-3"),
            "logs/gpu-scheduler-check-3.txt is missing",
            id="log-missing",
        ),
        pytest.param(
            lambda s: s.logs.update({"gpu-scheduler-check-0": report("node1", "0,1")}),
            "logs/gpu-scheduler-check-0.txt: the verify role saves no such log",
            id="log-the-verify-role-does-not-save",
        ),
        pytest.param(
            lambda s: s.logs.update({"gpu-scheduler-check-2": report("node3", "0,1")}),
            "logs/gpu-scheduler-check-2.txt: CUDA_VISIBLE_DEVICES ['0,1'], the map says 0,1,2",
            id="log-wrong-gpus",
        ),
        pytest.param(
            lambda s: s.logs.update({"gpu-scheduler-check-4": report("node3", "3")}),
            "logs/gpu-scheduler-check-4.txt: Node Name ['node3'], the map says node4",
            id="log-wrong-node",
        ),
        pytest.param(
            lambda s: s.logs.update({"gpu-scheduler-check-4": report("node4", "3", times=1)}),
            "logs/gpu-scheduler-check-4.txt: 1 reports, expected at least two",
            id="log-one-report",
        ),
    ],
)
def test_each_kind_of_stale_evidence_is_named(sample, tmp_path, breakage, message):
    """One thing wrong in an otherwise correct sample: the checks find it and say what it is."""
    breakage(sample)
    found = problems(sample.write(tmp_path))
    assert any(message in p for p in found), f"expected a problem with {message!r}, found {found}"
