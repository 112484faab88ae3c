"""kube-scheduler v1.34's NodeResourcesFit, NodePorts and NodeAffinity filters (scheduler.plugins, judged through
scheduler.framework's Cycle) on plain pod and node dicts, what they read (scheduler.fit), and NodeUsage, the
per-node running totals.

Expected values are derived from the Go source of the real thing (k8s.io/kubernetes v1.34.4
pkg/scheduler/framework/plugins/{noderesources,nodeports,nodeaffinity}, k8s.io/component-helpers v0.34.4
resource.PodRequests and scheduling/corev1/nodeaffinity, k8s.io/apimachinery resource.Quantity and labels). Where
fit.py and kube disagreed (pod-level hugepages, rounding per container, Gt/Lt parsing), the test states kube's
behaviour; those were shown failing before fit.py was fixed.
A hypothesis state machine checks NodeUsage against totals recomputed from scratch, and a fuzz checks that no
JSON-shaped pod makes the PreFilters (decision.cycle), the Filters, the Score phase or fit.footprint raise.
"""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
import tracemalloc
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpu_scheduling.scheduler import decision, fit, framework, plugins, volumes
from gpu_scheduling.scheduler.plugins import node_affinity, node_unschedulable
from gpu_scheduling.scheduler.plugins.node_affinity import NodeAffinity
from gpu_scheduling.scheduler.plugins.node_ports import NodePorts
from gpu_scheduling.scheduler.plugins.node_resources import NodeResourcesFit
from gpu_scheduling.scheduler.plugins.unsupported import unsupported

GPU = "nvidia.com/gpu"
TERMS_PATH = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


# ---- builders ---------------------------------------------------------------------------------------------------
def container(requests: dict[str, Any] | None = None, *, sidecar: bool = False, ports=None, name: str = "c"):
    """A container (an init container with restartPolicy Always when `sidecar`)."""
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if requests is not None:
        c["resources"] = {"requests": requests}
    if sidecar:
        c["restartPolicy"] = "Always"
    if ports is not None:
        c["ports"] = ports
    return c


def pod(containers=(), init=(), *, node_name=None, phase=None, **spec):
    """A pod with these containers and init containers; other spec fields as keywords."""
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = list(init)
    if node_name is not None:
        body["nodeName"] = node_name
    p: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": body}
    if phase is not None:
        p["status"] = {"phase": phase}
    return p


def cpu_pod(*cpus: str, init=()):
    """A pod whose containers request these cpus."""
    return pod([container({"cpu": c}) for c in cpus], init)


def node(name="n1", labels=None, allocatable=None):
    """A node with these labels and allocatable (default: 4 cpu, 16Gi, 110 pods)."""
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": allocatable or {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }


@dataclasses.dataclass(frozen=True)
class Want:
    """What the three node-fit plugins' PreFilters read of a pod."""

    requests: dict[str, int]
    ports: tuple[fit.Port, ...]
    node_selector: dict[str, str]
    terms: tuple[dict[str, Any], ...] | None


def want_of(p) -> Want:
    """What the plugins read of pod `p` (fit.FitError naming a field they cannot read)."""
    wanted = node_affinity.read(p)
    return Want(fit.pod_requests(p), fit.host_ports(p), dict(wanted.node_selector), wanted.terms)


def want(**spec) -> Want:
    """want_of a pod with one empty container and these spec fields."""
    return want_of(pod([container()], **spec))


def cycle_of(w: Want, usage: fit.NodeUsage) -> framework.Cycle:
    """The framework's attempt for a pod that wants `w`: the plugins in the profile's order, each only when its
    PreFilter would not skip."""
    active: list[tuple[framework.Plugin, Any]] = []
    if w.node_selector or w.terms is not None:
        active.append((NodeAffinity(), node_affinity.Wanted(w.node_selector, w.terms)))
    if w.ports:
        active.append((NodePorts(), w.ports))
    active.append((NodeResourcesFit(), w.requests))
    return framework.Cycle({}, framework.Snapshot(usage), tuple(active))


def _said(reason: framework.Reason | None) -> str | None:
    return None if reason is None else reason()


def affinity_problem(w: Want, n) -> str | None:
    return _said(node_affinity.refusal(node_affinity.Wanted(w.node_selector, w.terms), n))


def ports_problem(w: Want, n, usage: fit.NodeUsage) -> str | None:
    return _said(NodePorts().filter(w.ports, n, framework.Snapshot(usage))) if w.ports else None


def resources_problem(w: Want, n, usage: fit.NodeUsage) -> str | None:
    return _said(NodeResourcesFit().filter(w.requests, n, framework.Snapshot(usage)))


def problem(w: Want, n, usage: fit.NodeUsage) -> str | None:
    return cycle_of(w, usage).problem(n)


def fits(w: Want, n, usage: fit.NodeUsage) -> bool:
    return cycle_of(w, usage).fits(n)


def explain(w: Want, refused, nodes, usage: fit.NodeUsage, limit: int = 3) -> str:
    return cycle_of(w, usage).explain(refused, nodes, limit)


def pod_fit(p) -> framework.Cycle | str:
    """The pod's attempt (every PreFilter run), or why it cannot be judged."""
    return decision.cycle(p, framework.Snapshot(fit.NodeUsage()))


def wants(requests=None, ports=(), selector=None, terms=None) -> Want:
    """A Want built directly."""
    return Want(dict(requests or {}), tuple(ports), dict(selector or {}), terms)


def usage_with(*footprints: fit.Footprint) -> fit.NodeUsage:
    usage = fit.NodeUsage()
    for i, f in enumerate(footprints):
        usage.set(f"other-{i}", f)
    return usage


def taken(node_name="n1", requests=None, ports=()) -> fit.Footprint:
    return fit.Footprint(node_name, tuple(sorted((requests or {}).items())), tuple(ports))


def required_terms(*terms):
    """spec.affinity with these required node selector terms."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key, operator, *values):
    e: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    return e


# ---- quantity and amount ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "500m", 500),
        ("cpu", "1", 1000),
        ("cpu", "0.1", 100),
        ("cpu", "2", 2000),
        ("cpu", 2, 2000),
        ("cpu", "1.5", 1500),
        ("cpu", "250000u", 250),
        ("cpu", "1n", 1),  # MilliValue rounds up
        ("cpu", "1001u", 2),
        ("memory", "2Gi", 2 * 2**30),
        ("memory", "1e3", 1000),
        ("memory", "1E3", 1000),
        ("memory", "1.5e3", 1500),
        ("memory", "1k", 1000),
        ("memory", "1Ki", 1024),
        ("memory", "1M", 10**6),
        ("memory", "1Mi", 2**20),
        ("memory", "1G", 10**9),
        ("memory", "1E", 10**18),  # E alone is the exa suffix, not an exponent
        ("memory", "0.5", 1),  # Value rounds up
        ("memory", "500m", 1),
        ("memory", "0", 0),
        ("memory", ".5Gi", 2**29),
        (GPU, "2", 2),
        (GPU, 3, 3),
    ],
)
def test_amount_is_kube_value_in_the_scheduler_unit(resource, text, expected):
    assert fit.amount(resource, text, "f") == expected


def test_quantity_is_exact():
    assert fit.quantity("1Mi", "f") == 2**20
    assert fit.quantity("1M", "f") != fit.quantity("1Mi", "f")
    assert fit.quantity("100m", "f") * 10 == 1
    assert fit.quantity("1e-3", "f") == fit.quantity("1m", "f")


@pytest.mark.parametrize(
    "value",
    ["", "abc", "1x", "1KB", "Gi", "1.2.3", "1 Gi", "1ki", "1e", "e3", "m", None, [], {}, True, False, {"cpu": 1}],
)
def test_invalid_quantity_raises_fit_error_naming_the_field(value):
    with pytest.raises(fit.FitError, match=r"spec\.containers\[0\]\.resources\.requests\.cpu"):
        fit.amount("cpu", value, "spec.containers[0].resources.requests.cpu")


def test_a_very_long_quantity_is_refused_with_a_bounded_message():
    with pytest.raises(fit.FitError) as raised:
        fit.quantity("1" * 100_000, "spec.overhead.cpu")
    assert "spec.overhead.cpu" in str(raised.value)
    assert len(str(raised.value)) < 300


def test_a_huge_exponent_is_answered_promptly():
    code = (
        "from gpu_scheduling.scheduler import fit\n"
        "try:\n    fit.quantity('1e99999999999', 'f')\n"
        "except fit.FitError:\n    pass\n"
        "print('answered')\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=5, check=False)
    except subprocess.TimeoutExpired:
        done = None
    assert done is not None
    assert done.stdout.strip() == "answered"


# ---- pod_requests -----------------------------------------------------------------------------------------------
def test_requests_sum_the_containers():
    p = pod([container({"cpu": "500m", "memory": "1Gi"}), container({"cpu": "1", "memory": "512Mi"})])
    assert fit.pod_requests(p) == {"cpu": 1500, "memory": 2**30 + 2**29}


def test_a_pod_without_requests_asks_nothing():
    assert fit.pod_requests(pod([container(), container({})])) == {}
    assert fit.pod_requests({"spec": {}}) == {}
    assert fit.pod_requests({}) == {}


def test_init_containers_count_at_their_largest():
    # max(sum(containers)=2, max(init)=3) per resource: cpu from the init container, memory from the containers.
    p = pod(
        [container({"cpu": "1", "memory": "1Gi"}), container({"cpu": "1", "memory": "1Gi"})],
        [container({"cpu": "3", "memory": "1Gi"}), container({"cpu": "500m"})],
    )
    assert fit.pod_requests(p) == {"cpu": 3000, "memory": 2 * 2**30}


# The cases of component-helpers v0.34.4 resource/helpers_test.go TestPodResourceRequests (KEP-753 sidecars).
@pytest.mark.parametrize(
    ("init", "expected_cpu"),
    [
        pytest.param([container({"cpu": "1"}, sidecar=True)], 2000, id="restartable-init-plus-regular"),
        pytest.param(
            [
                container({"cpu": "5"}),
                container({"cpu": "1"}, sidecar=True),
                container({"cpu": "2"}, sidecar=True),
                container({"cpu": "3"}, sidecar=True),
            ],
            7000,
            id="max(5, sidecars 3+2+1 + regular 1) = 7",
        ),
        pytest.param(
            [
                container({"cpu": "5"}),
                container({"cpu": "1"}, sidecar=True),
                container({"cpu": "2"}, sidecar=True),
                container({"cpu": "5"}),
                container({"cpu": "3"}, sidecar=True),
            ],
            8000,
            id="init-2 needs 5 + earlier sidecars 1+2 = 8; the later sidecar does not count",
        ),
    ],
)
def test_sidecar_formula_of_kep_753(init, expected_cpu):
    assert fit.pod_requests(cpu_pod("1", init=init)) == {"cpu": expected_cpu}


def test_sidecar_before_a_large_init_container():
    # helpers_test.go "restartable-init, init and regular": max(10 + 100, 10 + 200) = 210.
    p = cpu_pod("100", init=[container({"cpu": "10"}, sidecar=True), container({"cpu": "200"})])
    assert fit.pod_requests(p) == {"cpu": 210_000}


def test_sidecar_resources_combine_per_resource():
    # Sidecar memory is added to the running containers and to the later init container's need.
    p = pod(
        [container({"memory": "1Gi"})],
        [container({"memory": "1Gi", GPU: "1"}, sidecar=True), container({"memory": "3Gi"})],
    )
    assert fit.pod_requests(p) == {"memory": 4 * 2**30, GPU: 1}


def test_a_restart_policy_other_than_always_is_a_plain_init_container():
    p = cpu_pod("1", init=[{**container({"cpu": "1"}), "restartPolicy": "OnFailure"}])
    assert fit.pod_requests(p) == {"cpu": 1000}


def test_overhead_is_added():
    p = pod([container({"cpu": "1", "memory": "1Gi"})], overhead={"cpu": "250m", "memory": "120Mi"})
    assert fit.pod_requests(p) == {"cpu": 1250, "memory": 2**30 + 120 * 2**20}


def test_overhead_alone_counts():
    assert fit.pod_requests(pod([container()], overhead={"cpu": "100m"})) == {"cpu": 100}


def test_pod_level_requests_replace_cpu_and_memory():
    # helpers_test.go "pod-level resources, container-level resources, init and sidecar container set".
    p = pod(
        [container({"memory": "3Mi", "cpu": "2m"})],
        [container({"memory": "5Mi", "cpu": "4m"}, sidecar=True), container({"memory": "6Mi", "cpu": "8m"})],
        resources={"requests": {"memory": "15Mi", "cpu": "18m"}},
    )
    assert fit.pod_requests(p) == {"memory": 15 * 2**20, "cpu": 18}


def test_pod_level_requests_replace_only_what_they_name_then_overhead_is_added():
    p = pod(
        [container({"cpu": "1", "memory": "1Gi", GPU: "2"})],
        resources={"requests": {"cpu": "3"}},
        overhead={"cpu": "100m"},
    )
    assert fit.pod_requests(p) == {"cpu": 3100, "memory": 2**30, GPU: 2}


def test_pod_level_hugepages_requests_replace_the_containers():
    # helpers_test.go "pod-level resources, container-level resources, hugepage request/limit single page size".
    p = pod(
        [container({"hugepages-2Mi": "6Mi"})],
        resources={"requests": {"cpu": "1", "hugepages-2Mi": "10Mi"}, "limits": {"hugepages-2Mi": "10Mi"}},
    )
    assert fit.pod_requests(p) == {"cpu": 1000, "hugepages-2Mi": 10 * 2**20}


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(pod([container({"memory": "500m"}), container({"memory": "500m"})]), {"memory": 1}, id="mem"),
        pytest.param(pod([container({"cpu": "500u"}), container({"cpu": "500u"})]), {"cpu": 1}, id="cpu"),
        pytest.param(pod([container({"memory": "0.5"})], overhead={"memory": "0.5"}), {"memory": 1}, id="overhead"),
    ],
)
def test_fractional_requests_round_once_per_pod(p, expected):
    assert fit.pod_requests(p) == expected


def test_uncounted_resources_are_ignored_and_scalar_ones_counted():
    p = pod(
        [
            container(
                {
                    "cpu": "1",
                    "pods": "3",
                    "storage": "1Gi",
                    "unknown": "5",
                    GPU: "2",
                    "hugepages-2Mi": "4Mi",
                    "example.com/foo": "1",
                    "ephemeral-storage": "1Gi",
                }
            ),
        ]
    )
    assert fit.pod_requests(p) == {
        "cpu": 1000,
        GPU: 2,
        "hugepages-2Mi": 4 * 2**20,
        "example.com/foo": 1,
        "ephemeral-storage": 2**30,
    }


def test_zero_requests_are_dropped():
    assert fit.pod_requests(pod([container({"cpu": "0", GPU: "0", "memory": "1"})])) == {"memory": 1}


def test_an_unreadable_request_names_its_field():
    with pytest.raises(fit.FitError, match=r"spec\.initContainers\[1\]\.resources\.requests\.memory"):
        fit.pod_requests(pod([container()], [container({"cpu": "1"}), container({"memory": "lots"})]))


# ---- host_ports and ports_problem -------------------------------------------------------------------------------
def test_host_ports_only_with_a_host_port_and_with_defaults():
    p = pod(
        [
            container(
                ports=[
                    {"containerPort": 8080},
                    {"containerPort": 80, "hostPort": 0},
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                ]
            )
        ]
    )
    assert fit.host_ports(p) == (("0.0.0.0", "TCP", 8080), ("10.0.0.1", "UDP", 53))


def test_host_ports_include_sidecars_not_plain_init_containers():
    p = pod(
        [container(ports=[{"containerPort": 1, "hostPort": 1000}])],
        [
            container(ports=[{"containerPort": 1, "hostPort": 2000}]),
            container(ports=[{"containerPort": 1, "hostPort": 3000}], sidecar=True),
        ],
    )
    assert fit.host_ports(p) == (("0.0.0.0", "TCP", 3000), ("0.0.0.0", "TCP", 1000))


def test_host_ports_of_a_pod_without_ports():
    assert fit.host_ports(pod([container()])) == ()


@pytest.mark.parametrize(
    ("wanted", "on_node", "conflict"),
    [
        (("0.0.0.0", "TCP", 80), ("10.0.0.1", "TCP", 80), True),
        (("10.0.0.1", "TCP", 80), ("0.0.0.0", "TCP", 80), True),
        (("0.0.0.0", "TCP", 80), ("0.0.0.0", "TCP", 80), True),
        (("10.0.0.1", "TCP", 80), ("10.0.0.1", "TCP", 80), True),
        (("10.0.0.1", "TCP", 80), ("10.0.0.2", "TCP", 80), False),
        (("0.0.0.0", "UDP", 80), ("0.0.0.0", "TCP", 80), False),
        (("10.0.0.1", "UDP", 80), ("0.0.0.0", "TCP", 80), False),
        (("0.0.0.0", "SCTP", 80), ("10.0.0.1", "TCP", 80), False),
        (("0.0.0.0", "TCP", 81), ("0.0.0.0", "TCP", 80), False),
    ],
)
def test_port_conflicts_as_host_port_info(wanted, on_node, conflict):
    problem = ports_problem(wants(ports=[wanted]), node(), usage_with(taken(ports=[on_node])))
    if conflict:
        assert problem == f"host port {wanted[0]}:{wanted[2]}/{wanted[1]} is taken on node n1"
    else:
        assert problem is None


def test_ports_on_another_node_do_not_conflict():
    usage = usage_with(taken("n2", ports=[("0.0.0.0", "TCP", 80)]))
    assert ports_problem(wants(ports=[("0.0.0.0", "TCP", 80)]), node("n1"), usage) is None
    assert ports_problem(wants(ports=[("0.0.0.0", "TCP", 80)]), node("n2"), usage) is not None


def test_a_port_stays_taken_while_another_pod_holds_it():
    usage = usage_with(taken(ports=[("0.0.0.0", "TCP", 80)]), taken(ports=[("0.0.0.0", "TCP", 80)]))
    usage.set("other-0", None)
    assert ports_problem(wants(ports=[("0.0.0.0", "TCP", 80)]), node(), usage) is not None
    usage.set("other-1", None)
    assert ports_problem(wants(ports=[("0.0.0.0", "TCP", 80)]), node(), usage) is None


# ---- NodeAffinity -----------------------------------------------------------------------------------------------
def test_node_selector_needs_every_label():
    w = want(nodeSelector={"gpu": "a100", "zone": "z1"})
    assert affinity_problem(w, node(labels={"gpu": "a100", "zone": "z1", "x": "y"})) is None
    assert "nodeSelector (zone=z1)" in affinity_problem(w, node(labels={"gpu": "a100", "zone": "z2"}))
    assert affinity_problem(w, node(labels={"gpu": "a100"})) is not None
    assert affinity_problem(w, node(labels=None)) is not None


def test_no_selector_and_no_terms_match_every_node():
    assert affinity_problem(want(), node(labels=None)) is None
    assert want().terms is None


def test_terms_are_ored():
    w = want(
        affinity=required_terms(
            {"matchExpressions": [expr("a", "Exists")]}, {"matchExpressions": [expr("b", "Exists")]}
        )
    )
    assert affinity_problem(w, node(labels={"a": "1"})) is None
    assert affinity_problem(w, node(labels={"b": "1"})) is None
    assert affinity_problem(w, node(labels={"c": "1"})) == "node n1 does not match the pod's required node affinity"


def test_expressions_are_anded():
    term = {"matchExpressions": [expr("a", "Exists"), expr("b", "In", "x")]}
    assert fit.term_matches(term, node(labels={"a": "1", "b": "x"}))
    assert not fit.term_matches(term, node(labels={"a": "1", "b": "y"}))
    assert not fit.term_matches(term, node(labels={"b": "x"}))


def test_node_selector_and_terms_both_apply():
    w = want(nodeSelector={"a": "1"}, affinity=required_terms({"matchExpressions": [expr("b", "Exists")]}))
    assert affinity_problem(w, node(labels={"a": "1", "b": ""})) is None
    assert affinity_problem(w, node(labels={"a": "1"})) is not None
    assert affinity_problem(w, node(labels={"b": ""})) is not None


@pytest.mark.parametrize(
    ("expression", "labels", "matches"),
    [
        (expr("k", "In", "a", "b"), {"k": "b"}, True),
        (expr("k", "In", "a", "b"), {"k": "c"}, False),
        (expr("k", "In", "a"), {}, False),
        (expr("k", "NotIn", "a", "b"), {"k": "c"}, True),
        (expr("k", "NotIn", "a", "b"), {"k": "a"}, False),
        (expr("k", "NotIn", "a"), {}, True),  # a missing label is not in any set
        (expr("k", "Exists"), {"k": ""}, True),
        (expr("k", "Exists"), {"j": "x"}, False),
        (expr("k", "DoesNotExist"), {}, True),
        (expr("k", "DoesNotExist"), {"k": "x"}, False),
        (expr("k", "Gt", "3"), {"k": "4"}, True),
        (expr("k", "Gt", "3"), {"k": "3"}, False),
        (expr("k", "Gt", "3"), {"k": "-10"}, False),
        (expr("k", "Gt", "-3"), {"k": "007"}, True),
        (expr("k", "Lt", "3"), {"k": "2"}, True),
        (expr("k", "Lt", "3"), {"k": "3"}, False),
        (expr("k", "Gt", "3"), {"k": "four"}, False),  # not an integer: no match
        (expr("k", "Lt", "3"), {"k": "1.5"}, False),
        (expr("k", "Gt", "3"), {}, False),
        (expr("k", "Lt", "3"), {}, False),
        (expr("k", "Gt", "1", "2"), {"k": "5"}, False),  # Gt/Lt take exactly one value
        (expr("k", "Unknown", "a"), {"k": "a"}, False),
    ],
)
def test_expression_operators(expression, labels, matches):
    assert fit.term_matches({"matchExpressions": [expression]}, node(labels=labels)) is matches


@pytest.mark.parametrize("label", ["1_0", "99999999999999999999"])
def test_gt_refuses_labels_go_cannot_parse(label):
    assert not fit.term_matches({"matchExpressions": [expr("k", "Gt", "5")]}, node(labels={"k": label}))


def test_match_fields_on_metadata_name():
    assert fit.term_matches({"matchFields": [expr("metadata.name", "In", "n1")]}, node("n1"))
    assert not fit.term_matches({"matchFields": [expr("metadata.name", "In", "n2")]}, node("n1"))
    assert fit.term_matches({"matchFields": [expr("metadata.name", "NotIn", "n2")]}, node("n1"))
    assert not fit.term_matches({"matchFields": [expr("metadata.name", "NotIn", "n1")]}, node("n1"))
    assert not fit.term_matches({"matchFields": [expr("metadata.uid", "In", "n1")]}, node("n1"))


def test_match_fields_and_expressions_in_one_term_are_anded():
    term = {"matchExpressions": [expr("a", "Exists")], "matchFields": [expr("metadata.name", "In", "n1")]}
    assert fit.term_matches(term, node("n1", labels={"a": "1"}))
    assert not fit.term_matches(term, node("n2", labels={"a": "1"}))
    assert not fit.term_matches(term, node("n1"))


def test_an_empty_term_matches_nothing():
    assert not fit.term_matches({}, node(labels={"a": "1"}))
    assert not fit.term_matches({"matchExpressions": [], "matchFields": []}, node())
    w = want(affinity=required_terms({}))
    assert affinity_problem(w, node()) is not None
    # An empty term beside a matching one does not spoil it.
    w = want(affinity=required_terms({}, {"matchExpressions": [expr("a", "Exists")]}))
    assert affinity_problem(w, node(labels={"a": "1"})) is None


def test_no_terms_at_all_match_no_node():
    # LazyErrorNodeSelector with no terms: Match returns false.
    w = want(affinity=required_terms())
    assert w.terms == ()
    assert affinity_problem(w, node()) is not None


# ---- NodeResourcesFit -------------------------------------------------------------------------------------------
def test_too_many_pods():
    n = node(allocatable={"cpu": "4", "pods": "2"})
    assert resources_problem(wants(), n, usage_with(taken())) is None
    assert resources_problem(wants(), n, usage_with(taken(), taken())) == "Too many pods (node n1 has 2 of 2)"
    assert resources_problem(wants(), node(allocatable={"cpu": "4"}), fit.NodeUsage()).startswith("Too many pods")


@pytest.mark.parametrize(
    ("resource", "allocatable", "used", "asked"),
    [
        ("cpu", "4", 3500, 501),
        ("memory", "16Gi", 15 * 2**30, 2**30 + 1),
        ("ephemeral-storage", "100Gi", 2**30, 99 * 2**30 + 1),
        (GPU, "8", 7, 2),
        ("hugepages-2Mi", "1Gi", 0, 2**30 + 1),
    ],
)
def test_insufficient_resource(resource, allocatable, used, asked):
    n = node(allocatable={resource: allocatable, "pods": "110"})
    usage = usage_with(taken(requests={resource: used}))
    assert resources_problem(wants({resource: asked}), n, usage).startswith(f"Insufficient {resource} (")
    # One unit less is an exact fit.
    assert resources_problem(wants({resource: asked - 1}), n, usage) is None


def test_insufficient_message_shows_cpu_in_cores():
    usage = usage_with(taken(requests={"cpu": 2500}))
    assert resources_problem(wants({"cpu": 2000}), node(), usage) == (
        "Insufficient cpu (the pod requests 2; node n1 has 1.5 of 4 left)"
    )


def test_every_insufficient_resource_is_named():
    problem = resources_problem(wants({"cpu": 5000, "memory": 17 * 2**30, GPU: 1}), node(), fit.NodeUsage())
    assert problem.count("Insufficient") == 3
    assert "Insufficient cpu" in problem
    assert "Insufficient memory" in problem
    assert f"Insufficient {GPU}" in problem


def test_a_resource_not_requested_is_not_checked_even_when_overcommitted():
    usage = usage_with(taken(requests={"memory": 64 * 2**30, GPU: 9}))
    assert resources_problem(wants({"cpu": 1000}), node(), usage) is None
    assert resources_problem(wants({"memory": 1}), node(), usage).startswith("Insufficient memory")


def test_a_node_lacking_an_extended_resource_is_insufficient():
    assert resources_problem(wants({GPU: 1}), node(), fit.NodeUsage()) == (
        f"Insufficient {GPU} (the pod requests 1; node n1 has 0 of 0 left)"
    )


def test_exact_fit():
    n = node(allocatable={"cpu": "4", "memory": "16Gi", GPU: "8", "pods": "110"})
    usage = usage_with(taken(requests={"cpu": 1000, "memory": 2**30, GPU: 3}))
    assert resources_problem(wants({"cpu": 3000, "memory": 15 * 2**30, GPU: 5}), n, usage) is None


def test_usage_on_other_nodes_does_not_count():
    usage = usage_with(taken("n2", requests={"cpu": 4000}))
    assert resources_problem(wants({"cpu": 4000}), node("n1"), usage) is None
    assert resources_problem(wants({"cpu": 4000}), node("n2"), usage) is not None


def test_counted_pods_count():
    usage = fit.NodeUsage()
    usage.set("x", taken(requests={"cpu": 3000}))
    assert resources_problem(wants({"cpu": 2000}), node(), usage) is not None
    usage.set("x", None)
    assert resources_problem(wants({"cpu": 2000}), node(), usage) is None


def test_problem_checks_affinity_then_ports_then_resources():
    usage = usage_with(taken(requests={"cpu": 4000}, ports=[("0.0.0.0", "TCP", 80)]))
    w = wants({"cpu": 1000}, [("0.0.0.0", "TCP", 80)], {"a": "1"})
    assert "nodeSelector" in problem(w, node(), usage)
    assert "host port" in problem(w, node(labels={"a": "1"}), usage)
    w = wants({"cpu": 1000}, [], {"a": "1"})
    assert problem(w, node(labels={"a": "1"}), usage).startswith("Insufficient cpu")
    assert problem(w, node(labels={"a": "1"}), fit.NodeUsage()) is None


def test_fit_leaves_cordons_and_taints_to_node_problem():
    cordoned = {
        **node(),
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
    }
    cordoned["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert problem(want(), cordoned, fit.NodeUsage()) is None
    assert "cordoned" in decision.node_problem(cordoned, [])
    # Tolerating the cordon taint lets the pod past the cordon, but not past the other taint.
    assert "taint k:NoSchedule" in decision.node_problem(cordoned, [dict(node_unschedulable.CORDON_TAINT)])
    assert (
        decision.node_problem(cordoned, [dict(node_unschedulable.CORDON_TAINT), {"key": "k", "operator": "Exists"}])
        is None
    )


# ---- unsupported: only DRA claims now (pod affinity and spread are plugins: test_pod_affinity_and_spread.py) -------
@pytest.mark.parametrize("kind", ["podAffinity", "podAntiAffinity"])
def test_required_and_preferred_pod_affinity_are_judged_not_refused(kind):
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    for form, listed in (
        ("requiredDuringSchedulingIgnoredDuringExecution", [term]),
        ("preferredDuringSchedulingIgnoredDuringExecution", [{"weight": 1, "podAffinityTerm": term}]),
    ):
        p = pod([container()], affinity={kind: {form: listed}})
        assert unsupported(p) is None
        assert isinstance(pod_fit(p), framework.Cycle)


def test_topology_spread_is_judged_not_refused():
    for when in ("ScheduleAnyway", "DoNotSchedule"):
        assert unsupported(pod([container()], topologySpreadConstraints=[spread(when)])) is None


def spread(when=None):
    c: dict[str, Any] = {"maxSkew": 1, "topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}
    if when is not None:
        c["whenUnsatisfiable"] = when
    return c


def test_resource_claims_are_unsupported():
    p = pod([container()], resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}])
    assert "spec.resourceClaims" in unsupported(p)
    assert "spec.resourceClaims" in pod_fit(p)


def test_a_plain_pod_asks_for_nothing_unsupported():
    assert unsupported(pod([container({"cpu": "1"})])) is None
    assert unsupported(pod([container()], resourceClaims=[], topologySpreadConstraints=[])) is None


# ---- want and pod_fit on malformed pods -------------------------------------------------------------------------
def test_want_reads_the_pod():
    p = pod(
        [container({"cpu": "1"}, ports=[{"containerPort": 80, "hostPort": 80}])],
        nodeSelector={"a": "1"},
        affinity=required_terms({"matchExpressions": [expr("b", "Exists")]}),
    )
    w = want_of(p)
    assert w == Want(
        {"cpu": 1000}, (("0.0.0.0", "TCP", 80),), {"a": "1"}, ({"matchExpressions": [expr("b", "Exists")]},)
    )
    attempt = pod_fit(p)
    assert isinstance(attempt, framework.Cycle)
    assert attempt.state("NodeAffinity") == node_affinity.Wanted(w.node_selector, w.terms)
    assert attempt.state("NodePorts") == w.ports and attempt.state("NodeResourcesFit") == w.requests


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec",), [], "spec"),
        (("spec",), "x", "spec"),
        (("spec", "nodeSelector"), {"a": 1}, "spec.nodeSelector"),
        (("spec", "nodeSelector"), ["a"], "spec.nodeSelector"),
        (("spec", "affinity"), [1], "spec.affinity"),
        (("spec", "affinity", "nodeAffinity"), "x", "spec.affinity.nodeAffinity"),
        ((*TERMS_PATH, "nodeSelectorTerms"), {"a": 1}, "nodeSelectorTerms"),
        ((*TERMS_PATH, "nodeSelectorTerms"), ["x"], "nodeSelectorTerms"),
        ((*TERMS_PATH,), [], "nodeSelectorTerms"),
        (("spec", "containers"), {"a": 1}, "spec.containers"),
        (("spec", "containers"), ["x"], "spec.containers"),
        (("spec", "containers", 0, "resources"), [], r"spec\.containers\[0\]\.resources"),
        (("spec", "containers", 0, "resources", "requests", "cpu"), "fast", r"spec\.containers\[0\]"),
        (("spec", "containers", 0, "ports"), ["x"], "port"),
        (("spec", "containers", 0, "ports", 0, "hostPort"), "80", "hostPort"),
        (("spec", "overhead"), "x", "spec.overhead"),
    ],
)
def test_wrong_shapes_raise_fit_error_and_pod_fit_says_why(path, value, field):
    p = base_pod()
    put(p, path, value)
    with pytest.raises(fit.FitError, match=field):
        want_of(p)
    said = pod_fit(p)
    assert isinstance(said, str)
    assert said


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "affinity", "podAffinity"), "x"),
        (("spec", "topologySpreadConstraints"), {"a": 1}),
    ],
)
def test_wrong_shapes_of_pod_affinity_and_spread_are_reported_by_pod_fit(path, value):
    p = base_pod()
    put(p, path, value)
    assert isinstance(pod_fit(p), str)


@pytest.mark.parametrize("value", [5, True, 1.5])
def test_a_non_array_ports_field_never_raises(value):
    p = base_pod()
    put(p, ("spec", "containers", 0, "ports"), value)
    assert isinstance(pod_fit(p), str)
    assert fit.footprint(p) == fit.Footprint("n1", (), (), BASE_POD_CLAIMS, "default", name="p")


@pytest.mark.parametrize(
    "term",
    [
        {"matchExpressions": 5},
        {"matchFields": 5},
        {"matchExpressions": [{"key": "k", "operator": "Gt", "values": [None]}]},
    ],
)
def test_a_malformed_term_is_refused_naming_the_field(term):
    w = pod_fit(pod([container()], affinity=required_terms(term)))
    assert isinstance(w, str) and "nodeSelectorTerms[0]" in w, w


# ---- fuzz: no JSON value anywhere makes pod_fit or footprint raise -------------------------------------------------
BASE_POD_CLAIMS = ("default/data", "default/p-scratch")
"""The claims of base_pod's volumes, as its footprint names them."""


def base_pod() -> dict[str, Any]:
    """A bound pod that reaches every field the rules read."""
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {
                    "name": "c",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    "ports": [{"containerPort": 80, "hostPort": 80}],
                }
            ],
            "initContainers": [{"name": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}],
            "nodeSelector": {"a": "1"},
            "affinity": required_terms({"matchExpressions": [expr("k", "In", "v")]}),
            "overhead": {"cpu": "10m"},
            "resources": {"requests": {"cpu": "3"}},
            "topologySpreadConstraints": [spread("ScheduleAnyway")],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
            ],
        },
        "status": {"phase": "Pending"},
    }


def put(p: dict[str, Any], path: tuple, value: Any) -> None:
    at: Any = p
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = value


ANTI_PATH = ("spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
PREFERRED_NODE_PATH = ("spec", "affinity", "nodeAffinity", PREFERRED)
PREFERRED_POD_PATH = ("spec", "affinity", "podAffinity", PREFERRED)
PREFERRED_ANTI_PATH = ("spec", "affinity", "podAntiAffinity", PREFERRED)
FUZZ_SPREAD = {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
FUZZ_TERM = {
    "topologyKey": "k",
    "labelSelector": {"matchExpressions": [{"key": "k", "operator": "In", "values": ["1"]}]},
}


def fuzz_affinity() -> dict[str, Any]:
    """The fuzzed pod's affinity: a term of every kind the rules read, required and preferred."""
    weighted = {"weight": 10, "podAffinityTerm": copy.deepcopy(FUZZ_TERM)}
    preference = {"matchExpressions": [{"key": "k", "operator": "In", "values": ["1"]}]}
    return {
        "nodeAffinity": {PREFERRED: [{"weight": 5, "preference": preference}]},
        "podAffinity": {PREFERRED: [weighted]},
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [copy.deepcopy(FUZZ_TERM)],
            PREFERRED: [copy.deepcopy(weighted)],
        },
    }


FUZZ_PATHS = [
    ("metadata",),
    ("spec",),
    ("spec", "nodeName"),
    ("spec", "containers"),
    ("spec", "containers", 0),
    ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "requests"),
    ("spec", "containers", 0, "resources", "requests", "cpu"),
    ("spec", "containers", 0, "ports"),
    ("spec", "containers", 0, "ports", 0),
    ("spec", "containers", 0, "ports", 0, "hostPort"),
    ("spec", "containers", 0, "ports", 0, "hostIP"),
    ("spec", "initContainers"),
    ("spec", "initContainers", 0),
    ("spec", "initContainers", 0, "restartPolicy"),
    ("spec", "initContainers", 0, "resources", "requests"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    TERMS_PATH,
    (*TERMS_PATH, "nodeSelectorTerms"),
    (*TERMS_PATH, "nodeSelectorTerms", 0),
    (*TERMS_PATH, "nodeSelectorTerms", 0, "matchExpressions"),
    (*TERMS_PATH, "nodeSelectorTerms", 0, "matchExpressions", 0),
    (*TERMS_PATH, "nodeSelectorTerms", 0, "matchExpressions", 0, "values"),
    (*TERMS_PATH, "nodeSelectorTerms", 0, "matchFields"),
    ("spec", "affinity", "podAffinity"),
    ("spec", "affinity", "podAntiAffinity"),
    ANTI_PATH,
    (*ANTI_PATH, 0),
    (*ANTI_PATH, 0, "topologyKey"),
    (*ANTI_PATH, 0, "labelSelector"),
    (*ANTI_PATH, 0, "labelSelector", "matchLabels"),
    (*ANTI_PATH, 0, "labelSelector", "matchExpressions"),
    (*ANTI_PATH, 0, "labelSelector", "matchExpressions", 0),
    (*ANTI_PATH, 0, "labelSelector", "matchExpressions", 0, "operator"),
    (*ANTI_PATH, 0, "namespaces"),
    (*ANTI_PATH, 0, "namespaceSelector"),
    (*ANTI_PATH, 0, "matchLabelKeys"),
    (*ANTI_PATH, 0, "mismatchLabelKeys"),
    ("spec", "topologySpreadConstraints"),
    ("spec", "topologySpreadConstraints", 0),
    ("spec", "topologySpreadConstraints", 0, "maxSkew"),
    ("spec", "topologySpreadConstraints", 0, "minDomains"),
    ("spec", "topologySpreadConstraints", 0, "labelSelector"),
    ("spec", "topologySpreadConstraints", 0, "whenUnsatisfiable"),
    ("spec", "topologySpreadConstraints", 0, "nodeAffinityPolicy"),
    ("spec", "topologySpreadConstraints", 0, "nodeTaintsPolicy"),
    ("spec", "topologySpreadConstraints", 0, "matchLabelKeys"),
    ("spec", "topologySpreadConstraints", 1),
    ("spec", "topologySpreadConstraints", 1, "maxSkew"),
    ("spec", "topologySpreadConstraints", 1, "topologyKey"),
    ("spec", "topologySpreadConstraints", 1, "labelSelector"),
    ("spec", "topologySpreadConstraints", 1, "nodeTaintsPolicy"),
    PREFERRED_NODE_PATH,
    (*PREFERRED_NODE_PATH, 0),
    (*PREFERRED_NODE_PATH, 0, "weight"),
    (*PREFERRED_NODE_PATH, 0, "preference"),
    (*PREFERRED_NODE_PATH, 0, "preference", "matchExpressions"),
    (*PREFERRED_NODE_PATH, 0, "preference", "matchExpressions", 0, "operator"),
    PREFERRED_POD_PATH,
    (*PREFERRED_POD_PATH, 0),
    (*PREFERRED_POD_PATH, 0, "weight"),
    (*PREFERRED_POD_PATH, 0, "podAffinityTerm"),
    (*PREFERRED_POD_PATH, 0, "podAffinityTerm", "topologyKey"),
    (*PREFERRED_POD_PATH, 0, "podAffinityTerm", "labelSelector"),
    (*PREFERRED_POD_PATH, 0, "podAffinityTerm", "namespaceSelector"),
    ("spec", "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    PREFERRED_ANTI_PATH,
    (*PREFERRED_ANTI_PATH, 0, "weight"),
    (*PREFERRED_ANTI_PATH, 0, "podAffinityTerm"),
    (*PREFERRED_ANTI_PATH, 0, "podAffinityTerm", "matchLabelKeys"),
    ("spec", "tolerations"),
    ("spec", "tolerations", 0),
    ("spec", "tolerations", 0, "effect"),
    ("spec", "tolerations", 0, "operator"),
    ("metadata", "labels"),
    ("metadata", "namespace"),
    ("metadata", "deletionTimestamp"),
    ("spec", "overhead"),
    ("spec", "resources"),
    ("spec", "topologySpreadConstraints"),
    ("spec", "topologySpreadConstraints", 0),
    ("spec", "resourceClaims"),
    ("spec", "volumes"),
    ("spec", "volumes", 0),
    ("spec", "volumes", 0, "persistentVolumeClaim"),
    ("spec", "volumes", 0, "persistentVolumeClaim", "claimName"),
    ("spec", "volumes", 1, "ephemeral"),
    ("status",),
    ("status", "phase"),
]
# Field names the rules read, so that generated objects reach them.
FIELD_NAMES = [
    "labelSelector",
    "matchLabels",
    "matchExpressions",
    "topologyKey",
    "namespaceSelector",
    "maxSkew",
    "whenUnsatisfiable",
    "ports",
    "matchFields",
    "key",
    "operator",
    "values",
    "containers",
    "initContainers",
    "resources",
    "requests",
    "restartPolicy",
    "hostPort",
    "hostIP",
    "protocol",
    "nodeSelector",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    "matchExpressions",
    "podAffinity",
    "podAntiAffinity",
    "topologySpreadConstraints",
    "whenUnsatisfiable",
    "resourceClaims",
    "overhead",
    "nodeName",
    "phase",
    "cpu",
    "memory",
    GPU,
    "hugepages-2Mi",
    "volumes",
    "persistentVolumeClaim",
    "claimName",
    "ephemeral",
    PREFERRED,
    "weight",
    "preference",
    "podAffinityTerm",
    "tolerations",
    "effect",
    "value",
]
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(
        ["Always", "500m", "2Gi", "1e3", "DoNotSchedule", "ScheduleAnyway", "PreferNoSchedule", "Succeeded", "0.0.0.0"]
    )
    | st.sampled_from(["-1", "Exists", "k", "1"])
)
JSON = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


FUZZ_VOLUMES = volumes.VolumeCache(
    claims={
        "default/data": {
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"storageClassName": "wffc", "accessModes": ["ReadWriteOnce"]},
        },
        "default/p-scratch": {
            "metadata": {
                "name": "p-scratch",
                "namespace": "default",
                "ownerReferences": [{"uid": "u", "controller": True}],
            },
            "spec": {"storageClassName": "wffc"},
        },
    },
    classes={"wffc": {"metadata": {"name": "wffc"}, "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer"}},
)
"""The claims of base_pod's volumes, unbound, of a WaitForFirstConsumer class: VolumeBinding judges them."""


@settings(max_examples=400)
@given(st.lists(st.tuples(st.sampled_from(FUZZ_PATHS), JSON), min_size=1, max_size=3))
def test_fuzz_pod_fit_and_footprint_never_raise(changes):
    """No JSON value anywhere makes the PreFilters, the Filters, the Score phase (PreScore, Score, NormalizeScore of
    every score plugin, with the placed pod's own preferences) or footprint raise; normalized scores stay 0..100."""
    p = base_pod()
    p["metadata"]["labels"] = {"k": "1"}
    p["spec"]["affinity"] = fuzz_affinity()
    p["spec"]["topologySpreadConstraints"] = [
        dict(FUZZ_SPREAD),
        dict(FUZZ_SPREAD, whenUnsatisfiable="ScheduleAnyway", labelSelector={"matchLabels": {"k": "1"}}),
    ]
    p["spec"]["tolerations"] = [{"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"}]
    for path, value in changes:
        try:
            put(p, path, copy.deepcopy(value))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed the way there
    usage = fit.NodeUsage()  # a placed pod with the pod's (anti-)affinity, so the pod is judged and ranked against it
    placed = pod(
        [container()],
        node_name="n1",
        affinity=copy.deepcopy(p["spec"].get("affinity")) if isinstance(p.get("spec"), dict) else None,
    )
    placed["metadata"]["labels"] = {"k": "1"}
    usage.set("placed", fit.footprint(placed))
    soft = node("n2", labels={"k": "2"})
    soft["spec"] = {
        "taints": [{"key": "soft", "effect": "PreferNoSchedule"}, {"key": "x", "effect": "PreferNoSchedule"}]
    }
    nodes = {"n1": node(labels={"k": "1"}), "n2": soft}
    snap = framework.Snapshot(usage, FUZZ_VOLUMES, nodes=nodes)
    said = decision.cycle(p, snap)
    assert isinstance(said, framework.Cycle) or (isinstance(said, str) and said)
    if isinstance(said, framework.Cycle):  # what the PreFilters accept, every Filter judges without raising
        for plugin, state in said.active:
            reason = plugin.filter(state, nodes["n1"], said.snap)
            assert reason is None or isinstance(reason(), str)
    scoring = framework.prepare_scores(p, snap, plugins.SCORE_PROFILE)
    if scoring is not None:
        for plugin, _, state in scoring.active:
            normalized = plugin.normalize(state, plugin.score(state, list(nodes.values()), snap))
            assert set(normalized) == set(nodes) and all(
                0 <= s <= framework.MAX_NODE_SCORE for s in normalized.values()
            )
        assert set(scoring.rank(list(nodes))) in (set(), set(nodes))
    f = fit.footprint(p)
    assert f is None or isinstance(f, fit.Footprint)
    assert fit.footprint(fit.trimmed(p)) == f, "the informer's trimmed view must take what the pod takes"
    assert fit.footprint(p, "n9") is None or fit.footprint(p, "n9").node == "n9"


# ---- footprint --------------------------------------------------------------------------------------------------
def test_footprint_of_a_bound_pod():
    p = pod(
        [container({"memory": "1Gi", "cpu": "1"}, ports=[{"containerPort": 80, "hostPort": 80}])],
        node_name="n1",
        phase="Running",
    )
    assert fit.footprint(p) == fit.Footprint(
        "n1", (("cpu", 1000), ("memory", 2**30)), (("0.0.0.0", "TCP", 80),), namespace="default", name="p"
    )


def test_footprint_keeps_what_preemption_reads():
    p = pod([container({"cpu": "1"})], node_name="n1", priority=1000)
    p["metadata"]["creationTimestamp"] = "2026-11-28T10:00:00Z"
    taken = fit.footprint(p)
    assert (taken.name, taken.priority, taken.started) == ("p", 1000, "2026-11-28T10:00:00Z")
    p["status"] = {"phase": "Running", "startTime": "2026-11-28T10:00:05Z"}
    assert fit.footprint(p).started == "2026-11-28T10:00:05Z"
    assert fit.footprint(fit.trimmed(p)) == fit.footprint(p)
    p["spec"]["priority"] = "high"  # never stored by the apiserver: counts as 0
    assert fit.footprint(p).priority == 0


def test_footprint_is_none_unbound_or_finished():
    assert fit.footprint(pod([container({"cpu": "1"})])) is None
    assert fit.footprint(pod([container({"cpu": "1"})], node_name="")) is None
    for phase in ("Succeeded", "Failed"):
        assert fit.footprint(pod([container({"cpu": "1"})], node_name="n1", phase=phase)) is None
        assert fit.footprint(pod([container({"cpu": "1"})], phase=phase), "n2") is None
    for phase in ("Pending", "Running", "Unknown"):
        assert fit.footprint(pod([container({"cpu": "1"})], node_name="n1", phase=phase)) is not None


def test_footprint_uses_the_given_node():
    p = pod([container({"cpu": "1"})], node_name="n1")
    assert fit.footprint(p, "n2").node == "n2"
    assert fit.footprint(pod([container({"cpu": "1"})]), "n3") == fit.Footprint(
        "n3", (("cpu", 1000),), (), namespace="default", name="p"
    )


def test_footprint_counts_the_claims_of_the_pods_volumes():
    p = base_pod()
    assert fit.footprint(p).claims == BASE_POD_CLAIMS
    usage = fit.NodeUsage()
    usage.set("a", fit.footprint(p))
    usage.set("b", fit.footprint(p))
    assert usage.claims("n1") == {"default/data": 2, "default/p-scratch": 2}
    usage.set("a", None)
    assert usage.claims("n1") == {"default/data": 1, "default/p-scratch": 1}
    usage.set("b", None)
    assert usage.claims("n1") == {}
    put(p, ("spec", "volumes"), "x")
    assert fit.footprint(p).claims == (), "volumes that cannot be read count as none"


def test_trimmed_keeps_only_the_claims_of_the_volumes():
    p = base_pod()
    p["spec"]["volumes"].append({"name": "cfg", "configMap": {"name": "settings"}})
    view = fit.trimmed(p)
    assert view["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "ephemeral": {}},
    ]
    assert fit.footprint(view) == fit.footprint(p)


def test_footprint_of_unreadable_resources_is_a_pod_without_requests():
    p = pod([container({"cpu": "lots"}, ports=[{"containerPort": 80, "hostPort": 80}])], node_name="n1")
    assert fit.footprint(p) == fit.Footprint("n1", (), (), namespace="default", name="p")


# ---- NodeUsage --------------------------------------------------------------------------------------------------
def test_set_returns_the_node_with_more_room():
    usage = fit.NodeUsage()
    first = taken("a", {"cpu": 1000, GPU: 1}, [("0.0.0.0", "TCP", 80)])
    assert usage.set("x", first) is None  # new
    assert usage.set("x", first) is None  # unchanged
    assert usage.set("x", taken("a", {"cpu": 2000, GPU: 1}, [("0.0.0.0", "TCP", 80)])) is None  # asks more
    assert usage.set("x", taken("a", {"cpu": 1000, GPU: 1}, [("0.0.0.0", "TCP", 80)])) == "a"  # asks less cpu
    assert usage.set("x", taken("a", {"cpu": 1000}, [("0.0.0.0", "TCP", 80)])) == "a"  # drops a resource
    assert usage.set("x", taken("a", {"cpu": 1000})) == "a"  # drops a port
    assert usage.set("x", taken("a", {"cpu": 1000}, [("0.0.0.0", "TCP", 81)])) is None  # adds a port
    assert usage.set("x", taken("b", {"cpu": 1000}, [("0.0.0.0", "TCP", 81)])) == "a"  # moves
    assert usage.set("x", None) == "b"  # leaves
    assert usage.set("x", None) is None  # already gone
    assert len(usage) == 0


UIDS = ("u1", "u2", "u3")
NODES = ("a", "b")
RESOURCES = ("cpu", "memory", GPU)
PORTS = (("0.0.0.0", "TCP", 80), ("10.0.0.1", "TCP", 80), ("0.0.0.0", "UDP", 53))
LABEL_SETS = ((), (("app", "a"),), (("app", "b"),), (("app", "a"), ("tier", "x")))
FOOTPRINTS = st.builds(
    lambda n, requests, ports, rank, ns, labels, ending: fit.Footprint(
        n,
        tuple(sorted(requests.items())),
        tuple(ports),
        priority=rank,
        namespace=ns,
        labels=labels,
        terminating=ending,
    ),
    st.sampled_from(NODES),
    st.dictionaries(st.sampled_from(RESOURCES), st.integers(1, 3), max_size=3),
    st.lists(st.sampled_from(PORTS), unique=True, max_size=2),
    st.integers(-1, 2),
    st.sampled_from(("ns1", "ns2")),
    st.sampled_from(LABEL_SETS),
    st.booleans(),
)


def freed(before: fit.Footprint | None, after: fit.Footprint | None) -> str | None:
    """The node `set` should name: the old one when the pod left it, moved, or asks less of it."""
    if before is None or before == after:
        return None
    if after is None or after.node != before.node:
        return before.node
    had, has = dict(before.requests), dict(after.requests)
    lower = any(has.get(r, 0) < q for r, q in had.items())
    dropped = any(p not in after.ports for p in before.ports)
    return before.node if lower or dropped else None


class Usage(RuleBasedStateMachine):
    """NodeUsage against a model (uid -> footprint), and its forks (copies for trial placements) against theirs:
    a change to either never shows in the other."""

    def __init__(self) -> None:
        super().__init__()
        self.usages = [fit.NodeUsage()]
        self.models: list[dict[str, fit.Footprint]] = [{}]

    @rule(data=st.data(), uid=st.sampled_from(UIDS), now=st.none() | FOOTPRINTS)
    def set(self, data, uid, now):
        i = data.draw(st.integers(0, len(self.usages) - 1))
        before = self.models[i].get(uid)
        got = self.usages[i].set(uid, now)
        if now is None:
            self.models[i].pop(uid, None)
        else:
            self.models[i][uid] = now
        assert got == freed(before, now)

    @precondition(lambda self: len(self.usages) < 4)
    @rule(data=st.data())
    def fork(self, data):
        i = data.draw(st.integers(0, len(self.usages) - 1))
        self.usages.append(self.usages[i].fork())
        self.models.append(dict(self.models[i]))

    @invariant()
    def totals_match_a_recount(self):
        for usage, model in zip(self.usages, self.models, strict=True):
            assert len(usage) == len(model)
            for n in NODES:
                here = [f for f in model.values() if f.node == n]
                assert usage.pods(n) == len(here)
                for r in RESOURCES:
                    assert usage.requested(n, r) == sum(dict(f.requests).get(r, 0) for f in here)
                assert dict(usage.ports(n)) == dict(Counter(p for f in here for p in f.ports))
            # preemption's shortcut: the lowest priority of any counted pod
            assert usage.lowest_priority() == min((f.priority for f in model.values()), default=None)
            # PodTopologySpread's groups: the live pods of a namespace by labels and node
            for ns in ("ns1", "ns2"):
                recount = Counter((f.labels, f.node) for f in model.values() if f.namespace == ns and not f.terminating)
                grouped = {(labels, n): k for labels, on in usage.label_groups(ns) for n, k in on.items()}
                assert grouped == dict(recount)
                assert all(on for _, on in usage.label_groups(ns))  # no empty group is kept


Usage.TestCase.settings = settings(max_examples=200, stateful_step_count=40)
TestUsage = Usage.TestCase


# ---- capacity, read once per node version ----------------------------------------------------------------------
def test_capacity_is_read_again_only_when_the_node_changes():
    usage = fit.NodeUsage()
    n = node(allocatable={"cpu": "4", "pods": "2"})
    n["metadata"]["resourceVersion"] = "1"
    assert usage.capacity(n) == {"cpu": 4000, "pods": 2}
    same_version = copy.deepcopy(n)
    same_version["status"]["allocatable"]["cpu"] = "8"
    assert usage.capacity(same_version)["cpu"] == 4000, "an unchanged resourceVersion is the same node"
    same_version["metadata"]["resourceVersion"] = "2"
    assert usage.capacity(same_version)["cpu"] == 8000
    usage.node_gone("n1")
    n["metadata"]["resourceVersion"] = "2"  # a node of the same name and version after it was deleted: read afresh
    assert usage.capacity(n)["cpu"] == 4000


def test_a_bare_pod_is_judged_by_the_pod_count_alone():
    bare = want_of(pod([container()]))
    attempt = pod_fit(pod([container()]))
    assert isinstance(attempt, framework.Cycle) and plugins.asks_only_a_place(attempt)
    asking = pod_fit(pod([container({"cpu": "1"})]))
    assert isinstance(asking, framework.Cycle) and not plugins.asks_only_a_place(asking)
    n = node(allocatable={"pods": "1"})
    assert problem(bare, n, fit.NodeUsage()) is None
    assert problem(bare, n, usage_with(taken())) == "Too many pods (node n1 has 1 of 1)"


def test_full_follows_the_pod_count_of_nodes_of_known_capacity():
    usage = fit.NodeUsage()
    n = node(allocatable={"pods": "2"})
    n["metadata"]["resourceVersion"] = "1"
    usage.set("a", taken())
    assert not usage.full and not usage.known("n1"), "a node of unknown capacity is never called full"
    usage.capacity(n)
    assert usage.known("n1") and not usage.full
    usage.set("b", taken())
    assert usage.full == {"n1"}
    trial = usage.fork()
    usage.set("b", None)
    assert not usage.full
    assert trial.full == {"n1"}, "a fork keeps its own count"
    trial.set("a", None)
    assert not trial.full
    usage.set("a", taken("n2"))  # moved away: n1 has room, n2's capacity is unknown
    usage.set("c", taken())
    usage.set("d", taken())
    assert usage.full == {"n1"}
    bigger = copy.deepcopy(n)
    bigger["metadata"]["resourceVersion"] = "2"
    bigger["status"]["allocatable"]["pods"] = "3"
    usage.capacity(bigger)
    assert not usage.full
    usage.set("e", taken())
    assert usage.full == {"n1"}
    usage.node_gone("n1")
    assert not usage.full


def test_the_trimmed_view_takes_what_the_pod_takes_and_keeps_little_else():
    ports = [{"containerPort": 80, "hostPort": 80}, {"containerPort": 81}]
    p = pod(
        [container({"cpu": "1", "memory": "1Gi"}, ports=ports)],
        init=[container({"cpu": "2"}, sidecar=True, ports=[{"containerPort": 1, "hostPort": 9000}])],
        node_name="n1",
        phase="Running",
    )
    p["spec"]["containers"][0]["env"] = [{"name": "BIG", "value": "x" * 1000}]
    p["metadata"]["labels"] = {"app": "web"}
    p["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    p["metadata"]["annotations"] = {"big": "x" * 1000}
    anti = [{"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "web"}}}]
    p["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti},
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    view = fit.trimmed(p)
    taken = fit.footprint(p)
    assert fit.footprint(view) == taken and taken is not None and taken.requests
    assert taken.labels == (("app", "web"),) and taken.terminating and len(taken.anti_affinity) == 1
    assert "env" not in view["spec"]["containers"][0] and len(view["spec"]["containers"][0]["ports"]) == 1
    assert "annotations" not in view["metadata"]
    assert view["spec"]["affinity"] == {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti},  # it ranks nodes for others
    }
    assert taken.preferences == ((taken.anti_affinity[0], 1),)


OTHER_POD_BUDGET_BYTES = 3072
"""What each bound pod of another scheduler may cost the scheduler, its trimmed view and its counted footprint
together, for a typical pod (four labels, requests, one container port, no affinity): 2.0 KB before pod
affinity, spread and preemption (which read its labels, namespace, priority, name and start), 2.8 KB since."""


def test_another_schedulers_pod_costs_at_most_its_budget():

    def typical(i: int) -> dict[str, Any]:
        labels = {"app": "web", "tier": "frontend", "pod-template-hash": f"7f9c{i % 100:04d}", "version": "v2"}
        return {
            "metadata": {
                "name": f"web-{i}",
                "namespace": "prod",
                "uid": f"uid-{i:08d}",
                "resourceVersion": str(1000 + i),
                "creationTimestamp": "2026-11-28T10:00:00Z",
                "labels": labels,
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {
                "nodeName": f"node{i % 200}",
                "priority": 0,
                "containers": [
                    {
                        "name": "c",
                        "image": "nginx:1.27",
                        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                        "ports": [{"containerPort": 80}],
                    }
                ],
            },
            "status": {"phase": "Running", "startTime": "2026-11-28T10:00:05Z", "podIP": "10.0.0.1"},
        }

    count = 2000
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        views = [fit.trimmed(typical(i)) for i in range(count)]
        usage = fit.NodeUsage()
        for view in views:
            usage.set(view["metadata"]["uid"], fit.footprint(view))
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    per_pod = sum(d.size_diff for d in after.compare_to(before, "filename")) / count
    assert per_pod <= OTHER_POD_BUDGET_BYTES, f"{per_pod:.0f} B per pod"


_RESOURCES = st.sampled_from(["cpu", "memory", GPU, "pods"])
_PORTS = st.tuples(st.sampled_from(["0.0.0.0", "10.0.0.1"]), st.sampled_from(["TCP", "UDP"]), st.integers(80, 82))


@given(
    requests=st.dictionaries(_RESOURCES.filter(lambda r: r != "pods"), st.integers(0, 5000), max_size=3),
    ports=st.lists(_PORTS, max_size=2),
    selector=st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["1", "2"]), max_size=2),
    labels=st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["1", "2"]), max_size=2),
    pods_allowed=st.integers(0, 3),
    on_node=st.lists(
        st.tuples(
            st.sampled_from(["n1", "n2"]),
            st.dictionaries(_RESOURCES.filter(lambda r: r != "pods"), st.integers(0, 4000), max_size=3),
            st.lists(_PORTS, max_size=1),
        ),
        max_size=4,
    ),
)
def test_fits_agrees_with_problem(requests, ports, selector, labels, pods_allowed, on_node):
    """`fits` is `problem(...) is None` without the words: the claim path filters every node with it and writes
    reasons for the few its message names, so the two must never disagree."""
    n = node(labels=labels, allocatable={"cpu": "4", "memory": "16Gi", GPU: "8", "pods": str(pods_allowed)})
    usage = usage_with(*(taken(where, req, ports_) for where, req, ports_ in on_node))
    w = wants(requests, ports, selector)
    assert fits(w, n, usage) == (problem(w, n, usage) is None)


def test_explain_writes_the_reasons_of_the_nodes_it_names_only():
    usage = usage_with(*(taken(f"n{i}", {"cpu": 4000}) for i in range(5)))
    nodes = {f"n{i}": node(f"n{i}") for i in range(5)}
    message = explain(wants({"cpu": 1000}), ["n4", "n3", "n2", "n1", "n0"], nodes, usage)
    assert message.startswith("Insufficient cpu (the pod requests 1; node n0 has 0 of 4 left); Insufficient cpu")
    assert message.endswith("node n2 has 0 of 4 left); and 2 more")
