"""The Score phase (scheduler.framework's Scoring, plugins.SCORE_PROFILE) and the allocator's use of it.

Each plugin's scores are checked against examples worked out by hand from kube-scheduler v1.34's scoring
(pkg/scheduler/framework/plugins/{nodeaffinity,tainttoleration,interpodaffinity,podtopologyspread}: the raw score of
each plugin, then its NormalizeScore); some are the cases of kube's own tests (node_affinity_test.go
TestNodeAffinityPriority, taint_toleration_test.go TestTaintTolerationScore, podtopologyspread scoring_test.go), the
others are computed in the comments beside them. Then: the weights (kube's defaults) and their sum, the PreScore
skips, the allocator (a preference ranks nodes after the topology preference and before the strategy; without one,
or with the same score everywhere, every choice is what it was, a property over random clusters), and the claim
path (ClaimPath.choose) ranking real nodes by a pod's preferred rules.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_scheduling import constants
from gpu_scheduling.claims import allocator
from gpu_scheduling.claims.allocator import Device, Holding, Node, Request
from gpu_scheduling.scheduler import fit, framework, plugins
from gpu_scheduling.scheduler.cache import Cache
from gpu_scheduling.scheduler.controller import Scheduler, SchedulerConfig
from gpu_scheduling.scheduler.plugins import pod_topology_spread
from gpu_scheduling.scheduler.plugins.inter_pod_affinity import InterPodAffinity
from gpu_scheduling.scheduler.plugins.node_affinity import NodeAffinity
from gpu_scheduling.scheduler.plugins.pod_topology_spread import PodTopologySpread
from gpu_scheduling.scheduler.plugins.taint_toleration import TaintToleration
from tests.unit.scheduler import labelled_pod as pod

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
HOST = "kubernetes.io/hostname"


# ---- builders ---------------------------------------------------------------------------------------------------
def node(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def snapshot(nodes: list[dict[str, Any]], *placed: dict[str, Any]) -> framework.Snapshot:
    cache = Cache(
        nodes={n["metadata"]["name"]: n for n in nodes},
        namespaces={"ns": {"metadata": {"name": "ns", "labels": {"team": "ml"}}}},
    )
    for p in placed:
        cache.observe(p["metadata"]["uid"], fit.footprint(p))
    return cache.snapshot


def scores(plugin: framework.Plugin, p: dict[str, Any], snap: framework.Snapshot) -> dict[str, int] | None:
    """The plugin's normalized score of every node of `snap` for pod `p` (None: its PreScore skips)."""
    state = plugin.pre_score(p, snap)
    if state is framework.SKIP:
        return None
    nodes = list(snap.nodes.values())
    normalized = plugin.normalize(state, plugin.score(state, nodes, snap))
    assert all(0 <= s <= framework.MAX_NODE_SCORE for s in normalized.values()), normalized
    return normalized


def raw(plugin: framework.Plugin, p: dict[str, Any], snap: framework.Snapshot) -> dict[str, int]:
    state = plugin.pre_score(p, snap)
    assert state is not framework.SKIP
    return plugin.score(state, list(snap.nodes.values()), snap)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def preferred_nodes(*weighted: tuple[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """spec.affinity with these preferred node selector terms (weight, matchExpressions)."""
    return {"nodeAffinity": {PREFERRED: [{"weight": w, "preference": {"matchExpressions": e}} for w, e in weighted]}}


def weighted_term(weight: int, key: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": {"topologyKey": key, "labelSelector": {"matchLabels": labels}}}


def taint(key: str, value: str = "", effect: str = "PreferNoSchedule") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def toleration(key: str, value: str, effect: str = "PreferNoSchedule") -> dict[str, str]:
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


# ---- NodeAffinity: kube's TestNodeAffinityPriority ---------------------------------------------------------------
FOO_BAR = [expr("foo", "In", "bar")]
AFFINITY_2 = preferred_nodes(
    (2, FOO_BAR),
    (4, [expr("key", "In", "value")]),
    (5, [expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1")]),
)
LABEL_1 = {"foo": "bar"}
LABEL_2 = {"key": "value"}
LABEL_3 = {"az": "az1"}
LABEL_4 = {"abc": "az11", "def": "az22"}
LABEL_5 = {"foo": "bar", "key": "value", "az": "az1"}


@pytest.mark.parametrize(
    ("affinity", "labels", "expected"),
    [
        pytest.param(
            preferred_nodes((2, FOO_BAR)),
            {"m1": LABEL_4, "m2": LABEL_2, "m3": LABEL_3},
            {"m1": 0, "m2": 0, "m3": 0},
            id="no-node-matches",
        ),
        pytest.param(
            preferred_nodes((2, FOO_BAR)),
            {"m1": LABEL_1, "m2": LABEL_2, "m3": LABEL_3},
            {"m1": 100, "m2": 0, "m3": 0},
            id="only-m1-matches",
        ),
        # m1 matches the first term (2), m5 all three (2 + 4 + 5 = 11), m2 the second (4): 100 * 2 // 11 = 18 and
        # 100 * 4 // 11 = 36.
        pytest.param(
            AFFINITY_2,
            {"m1": LABEL_1, "m5": LABEL_5, "m2": LABEL_2},
            {"m1": 18, "m5": 100, "m2": 36},
            id="all-match-with-different-priorities",
        ),
    ],
)
def test_node_affinity_scores_as_kube(affinity, labels, expected):
    snap = snapshot([node(name, ls) for name, ls in labels.items()])
    assert scores(NodeAffinity(), pod(affinity=affinity), snap) == expected


def test_node_affinity_skips_a_pod_without_preferred_terms_and_one_it_cannot_read():
    snap = snapshot([node("m1", LABEL_1)])
    required = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": FOO_BAR}]}}}
    assert scores(NodeAffinity(), pod(), snap) is None
    assert scores(NodeAffinity(), pod(affinity=required), snap) is None, "required terms are Filter's, not Score's"
    for broken in ("x", [{"weight": "2", "preference": {}}], [{"weight": 0, "preference": {}}], [5]):
        assert scores(NodeAffinity(), pod(affinity={"nodeAffinity": {PREFERRED: broken}}), snap) is None


def test_node_affinity_matches_fields_and_an_empty_term_matches_nothing():
    snap = snapshot([node("m1"), node("m2")])
    by_name = {
        "nodeAffinity": {PREFERRED: [{"weight": 3, "preference": {"matchFields": [expr("metadata.name", "In", "m2")]}}]}
    }
    assert scores(NodeAffinity(), pod(affinity=by_name), snap) == {"m1": 0, "m2": 100}
    empty = {"nodeAffinity": {PREFERRED: [{"weight": 3, "preference": {}}]}}
    assert scores(NodeAffinity(), pod(affinity=empty), snap) == {"m1": 0, "m2": 0}


# ---- TaintToleration: kube's TestTaintTolerationScore ------------------------------------------------------------
@pytest.mark.parametrize(
    ("tolerations", "taints", "expected"),
    [
        pytest.param(
            [toleration("foo", "bar")],
            {"A": [taint("foo", "bar")], "B": [taint("foo", "blah")]},
            {"A": 100, "B": 0},
            id="tolerated-beats-intolerable",
        ),
        pytest.param(
            [toleration("cpu-type", "arm64"), toleration("disk-type", "ssd")],
            {"A": [], "B": [taint("cpu-type", "arm64")], "C": [taint("cpu-type", "arm64"), taint("disk-type", "ssd")]},
            {"A": 100, "B": 100, "C": 100},
            id="tolerated-taints-do-not-count",
        ),
        # A has 0 intolerable taints, B 1, C 2: 100 - 100 * n // 2.
        pytest.param(
            [toleration("foo", "bar")],
            {"A": [], "B": [taint("cpu-type", "arm64")], "C": [taint("cpu-type", "arm64"), taint("disk-type", "ssd")]},
            {"A": 100, "B": 50, "C": 0},
            id="the-more-intolerable-the-lower",
        ),
        pytest.param(
            [toleration("cpu-type", "arm64", "NoSchedule"), toleration("disk-type", "ssd", "NoSchedule")],
            {
                "A": [],
                "B": [taint("cpu-type", "arm64", "NoSchedule")],
                "C": [taint("cpu-type", "arm64"), taint("disk-type", "ssd")],
            },
            {"A": 100, "B": 100, "C": 0},
            id="only-prefer-no-schedule-counts",
        ),
        pytest.param([], {"A": [], "B": [taint("cpu-type", "arm64")]}, {"A": 100, "B": 0}, id="no-tolerations"),
    ],
)
def test_taint_toleration_scores_as_kube(tolerations, taints, expected):
    snap = snapshot([node(name, taints=ts) for name, ts in taints.items()])
    assert scores(TaintToleration(), pod(tolerations=tolerations), snap) == expected


def test_a_toleration_without_effect_tolerates_a_prefer_no_schedule_taint():
    snap = snapshot([node("A", taints=[taint("foo", "bar")]), node("B")])
    anything = [{"key": "foo", "operator": "Exists"}]
    assert scores(TaintToleration(), pod(tolerations=anything), snap) == {"A": 100, "B": 100}


# ---- InterPodAffinity ---------------------------------------------------------------------------------------------
S1 = {"security": "S1"}
S2 = {"security": "S2"}
CHINA = {"region": "China"}
INDIA = {"region": "India"}


def test_inter_pod_affinity_prefers_the_region_of_a_matching_pod():
    # kube's "Affinity: pod that matches topology key & pods in nodes will get high score comparing to others which
    # doesn't match either pods in nodes or in topology key": only m1's region holds an S1 pod (+5); m3 has no region.
    snap = snapshot(
        [node("m1", CHINA), node("m2", INDIA), node("m3", {"az": "az1"})],
        pod("a", S1, bound_to="m1"),
        pod("b", S2, bound_to="m2"),
        pod("c", S1, bound_to="m3"),
    )
    stay = {"podAffinity": {PREFERRED: [weighted_term(5, "region", S1)]}}
    assert raw(InterPodAffinity(), pod(labels=S1, affinity=stay), snap) == {"m1": 5, "m2": 0, "m3": 0}
    assert scores(InterPodAffinity(), pod(labels=S1, affinity=stay), snap) == {"m1": 100, "m2": 0, "m3": 0}


def test_inter_pod_anti_affinity_prefers_the_zones_without_a_matching_pod():
    # kube's "Anti Affinity: pod that does not match existing pods in node will get high score": az1 holds an S1
    # pod (-5): scores -5, 0, 0 scaled from the lowest (0) to the highest (100).
    snap = snapshot(
        [node("m1", {"az": "az1"}), node("m2", CHINA), node("m3", {"az": "az2"})],
        pod("a", S1, bound_to="m1"),
        pod("b", S2, bound_to="m2"),
    )
    away = {"podAntiAffinity": {PREFERRED: [weighted_term(5, "az", S1)]}}
    assert scores(InterPodAffinity(), pod(labels=S1, affinity=away), snap) == {"m1": 0, "m2": 100, "m3": 100}


def test_inter_pod_affinity_and_anti_affinity_add_up():
    # Affinity to S1 by region (8), anti-affinity to S2 by zone (5). China +8, az2 -5: m1 (China, az1) 8, m2 (India,
    # az2) -5, m3 (China, az2) 3: 100 * (3 + 5) / 13 = 61.5, truncated.
    snap = snapshot(
        [
            node("m1", {"region": "China", "az": "az1"}),
            node("m2", {"region": "India", "az": "az2"}),
            node("m3", {"region": "China", "az": "az2"}),
        ],
        pod("a", S1, bound_to="m1"),
        pod("b", S2, bound_to="m2"),
    )
    both = {
        "podAffinity": {PREFERRED: [weighted_term(8, "region", S1)]},
        "podAntiAffinity": {PREFERRED: [weighted_term(5, "az", S2)]},
    }
    p = pod(labels=S1, affinity=both)
    assert raw(InterPodAffinity(), p, snap) == {"m1": 8, "m2": -5, "m3": 3}
    assert scores(InterPodAffinity(), p, snap) == {"m1": 100, "m2": 0, "m3": 61}


def test_placed_pods_terms_towards_the_incoming_pod_count_with_the_hard_affinity_weight():
    # The incoming pod has no terms. A pod on m1 requires affinity to S1 pods by region: China +1 (kube's
    # hardPodAffinityWeight); a pod on m2 prefers S1 pods by region with weight 5: India +5; a pod on m4 prefers
    # to keep S1 pods out of its zone with weight 3: az9 -3. Raw: m1 1, m2 5, m3 (China) 1, m4 (az9) -3;
    # normalized from -3 to 5: 100 * 4/8 = 50, 100, 50, 0.
    hard = {"podAffinity": {REQUIRED: [{"topologyKey": "region", "labelSelector": {"matchLabels": S1}}]}}
    soft = {"podAffinity": {PREFERRED: [weighted_term(5, "region", S1)]}}
    avoid = {"podAntiAffinity": {PREFERRED: [weighted_term(3, "az", S1)]}}
    snap = snapshot(
        [node("m1", CHINA), node("m2", INDIA), node("m3", CHINA), node("m4", {"az": "az9"})],
        pod("a", bound_to="m1", affinity=hard),
        pod("b", bound_to="m2", affinity=soft),
        pod("c", bound_to="m4", affinity=avoid),
    )
    incoming = pod(labels=S1)
    assert raw(InterPodAffinity(), incoming, snap) == {"m1": 1, "m2": 5, "m3": 1, "m4": -3}
    assert scores(InterPodAffinity(), incoming, snap) == {"m1": 50, "m2": 100, "m3": 50, "m4": 0}
    assert scores(InterPodAffinity(), pod(labels=S2), snap) is None, "no placed pod's terms match an S2 pod"
    assert scores(InterPodAffinity(), pod(labels=S1, namespace="other"), snap) is None, "terms are of their namespace"


def test_other_schedulers_pods_keep_their_preferences_through_the_trimmed_view():
    soft = {"podAffinity": {PREFERRED: [weighted_term(5, "region", S1)]}}
    snap = snapshot([node("m1", CHINA), node("m2", INDIA)], fit.trimmed(pod("b", bound_to="m2", affinity=soft)))
    assert scores(InterPodAffinity(), pod(labels=S1), snap) == {"m1": 0, "m2": 100}


def test_inter_pod_affinity_normalizes_with_kubes_float_arithmetic():
    # Raw 29, 100, 0: 100 * (29 / 100) is 28.999999999999996 in float64, which kube truncates to 28 (integer
    # arithmetic would say 29).
    snap = snapshot(
        [node("x", {"zone": "x"}), node("y", {"zone": "y"}), node("z", {"zone": "z"})],
        pod("a", {"app": "a"}, bound_to="x"),
        pod("b", {"app": "b"}, bound_to="y"),
    )
    terms = {
        "podAffinity": {PREFERRED: [weighted_term(29, "zone", {"app": "a"}), weighted_term(100, "zone", {"app": "b"})]}
    }
    assert scores(InterPodAffinity(), pod(affinity=terms), snap) == {"x": 28, "y": 100, "z": 0}


def test_inter_pod_affinity_skips_when_nothing_is_preferred_and_ignores_the_pod_itself():
    snap = snapshot([node("m1", CHINA)], pod("a", S1, bound_to="m1"))
    assert scores(InterPodAffinity(), pod(labels=S1), snap) is None
    required = {"podAffinity": {REQUIRED: [{"topologyKey": "region", "labelSelector": {"matchLabels": S1}}]}}
    assert scores(InterPodAffinity(), pod(labels=S1, affinity=required), snap) is None, "its own required: Filter's"
    itself = {"podAffinity": {PREFERRED: [weighted_term(5, "region", S1)]}}
    alone = snapshot([node("m1", CHINA), node("m2", INDIA)], pod("incoming", S1, bound_to="m1", affinity=itself))
    assert scores(InterPodAffinity(), pod(labels=S1, affinity=itself), alone) is None, (
        "its own assumption is not counted"
    )


# ---- PodTopologySpread ---------------------------------------------------------------------------------------------
def soft_spread(key: str, skew: int = 1, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": labels or {"foo": ""}},
        **extra,
    }


def placed(count: int, on: str, labels: dict[str, str] | None = None, namespace: str = "ns") -> list[dict[str, Any]]:
    return [pod(f"{on}-{i}", labels or {"foo": ""}, namespace, bound_to=on) for i in range(count)]


def test_topology_spread_on_nodes_as_kube():
    # kube's "one constraint on node, all 4 nodes are candidates": 2, 1, 0 and 3 matching pods, 4 domains: each
    # counts log(4 + 2) = 1.79 a pod: round(3.58) = 4, round(1.79) = 2, 0, round(5.38) = 5; then
    # 100 * (5 + 0 - score) / 5: 20, 60, 100, 0.
    nodes = [node(n, {"node": n}) for n in ("node-a", "node-b", "node-c", "node-d")]
    snap = snapshot(nodes, *placed(2, "node-a"), *placed(1, "node-b"), *placed(3, "node-d"))
    p = pod(labels={"foo": ""}, topologySpreadConstraints=[soft_spread("node")])
    assert raw(PodTopologySpread(), p, snap) == {"node-a": 4, "node-b": 2, "node-c": 0, "node-d": 5}
    assert scores(PodTopologySpread(), p, snap) == {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0}


def test_topology_spread_without_matching_pods_scores_every_node_alike():
    # kube's "one constraint on node, no existing pods".
    snap = snapshot([node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"})])
    p = pod(labels={"foo": ""}, topologySpreadConstraints=[soft_spread("node")])
    assert scores(PodTopologySpread(), p, snap) == {"node-a": 100, "node-b": 100}


def test_topology_spread_by_zone_ignores_nodes_without_the_key_and_counts_max_skew():
    # Zone 1 holds 1 matching pod, zone 2 holds 3; 2 domains: log(4) = 1.386 a pod. maxSkew 1: round(1.39) = 1,
    # round(4.16) = 4, normalized 100 * (4 + 1 - s) / 4: 100 and 25. maxSkew 3 adds 2 to each: 3 and 6, 100 and 50.
    # The node without a zone scores 0.
    nodes = [node("a1", {"zone": "1"}), node("a2", {"zone": "1"}), node("b1", {"zone": "2"}), node("b2", {"zone": "2"})]
    nodes.append(node("x"))
    snap = snapshot(nodes, *placed(1, "a1"), *placed(2, "b1"), *placed(1, "b2"), *placed(5, "x"))
    p = pod(labels={"foo": ""}, topologySpreadConstraints=[soft_spread("zone")])
    assert scores(PodTopologySpread(), p, snap) == {"a1": 100, "a2": 100, "b1": 25, "b2": 25, "x": 0}
    p = pod(labels={"foo": ""}, topologySpreadConstraints=[soft_spread("zone", skew=3)])
    assert raw(PodTopologySpread(), p, snap) == {"a1": 3, "a2": 3, "b1": 6, "b2": 6, "x": -1}
    assert scores(PodTopologySpread(), p, snap) == {"a1": 100, "a2": 100, "b1": 50, "b2": 50, "x": 0}


def test_topology_spread_counts_only_the_pods_its_filter_counts():
    # Only b's one pod counts: a's are of another namespace, terminating, not matched, or the pod itself; c is
    # tainted NoSchedule and the constraint honours taints, so its pod is not counted either. 3 domains of the
    # feasible nodes: log(5) = 1.61: a 0, b round(1.61) = 2, c 0; 100 * (2 - s) / 2.
    snap_nodes = [
        node("a", {"zone": "a"}),
        node("b", {"zone": "b"}),
        node("c", {"zone": "c"}, [taint("t", "", "NoSchedule")]),
    ]
    gone = pod("gone", {"foo": ""}, bound_to="a")
    gone["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    snap = snapshot(
        snap_nodes,
        *placed(1, "a", namespace="other"),
        gone,
        pod("unmatched", {"bar": ""}, bound_to="a"),
        pod("incoming", {"foo": ""}, bound_to="a"),
        *placed(1, "b"),
        *placed(1, "c"),
    )
    p = pod(labels={"foo": ""}, topologySpreadConstraints=[soft_spread("zone", nodeTaintsPolicy="Honor")])
    assert scores(PodTopologySpread(), p, snap) == {"a": 100, "b": 0, "c": 100}


def test_topology_spread_on_hostname_counts_each_nodes_own_pods():
    # The hostname key: the domains are the scored nodes (3: log(5) = 1.61 a pod) and each node counts its own pods.
    nodes = [node(n, {HOST: n}) for n in ("h1", "h2", "h3")]
    snap = snapshot(nodes, *placed(2, "h1"), *placed(1, "h2"))
    p = pod(labels={"foo": ""}, topologySpreadConstraints=[soft_spread(HOST)])
    # round(3.22) = 3, round(1.61) = 2, 0: 100 * (3 - s) / 3 = 0, 33, 100.
    assert scores(PodTopologySpread(), p, snap) == {"h1": 0, "h2": 33, "h3": 100}


def test_topology_spread_skips_without_schedule_anyway_constraints():
    snap = snapshot([node("a", {"zone": "a"})])
    hard = dict(soft_spread("zone"), whenUnsatisfiable="DoNotSchedule")
    assert scores(PodTopologySpread(), pod(topologySpreadConstraints=[hard]), snap) is None
    assert scores(PodTopologySpread(), pod(), snap) is None
    broken = dict(soft_spread("zone"), maxSkew=0)
    assert scores(PodTopologySpread(), pod(topologySpreadConstraints=[broken]), snap) is None


def test_rounding_is_gos_half_away_from_zero():
    assert [pod_topology_spread._round(x) for x in (0.0, 0.49999999999999994, 0.5, 1.5, 2.5, 3.4999)] == [
        0,
        0,
        1,
        2,
        3,
        3,
    ]


# ---- normalization ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw_scores", "reverse", "expected"),
    [
        ({"a": 0, "b": 0}, False, {"a": 0, "b": 0}),
        ({"a": 0, "b": 0}, True, {"a": 100, "b": 100}),
        ({"a": 1, "b": 3, "c": 0}, False, {"a": 33, "b": 100, "c": 0}),
        ({"a": 1, "b": 3, "c": 0}, True, {"a": 67, "b": 0, "c": 100}),
        ({"a": 2, "b": 11}, False, {"a": 18, "b": 100}),
    ],
)
def test_default_normalize_is_kubes(raw_scores, reverse, expected):
    assert framework.default_normalize(raw_scores, reverse) == expected


# ---- the profile: weights and their sum ---------------------------------------------------------------------------
def test_the_score_profile_has_kubes_default_weights():
    assert {plugin.name: weight for plugin, weight in plugins.SCORE_PROFILE} == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
    }


def test_a_nodes_preference_is_the_weighted_sum_of_the_plugins_scores():
    # n1 matches the preferred term (NodeAffinity 100, weighted 2: 200) but has a PreferNoSchedule taint
    # (TaintToleration 0); n2 matches nothing (0) and is untainted (100, weighted 3: 300). n2 wins; were the
    # weights the other way round, n1 would.
    nodes = [node("n1", {"fast": "yes"}, [taint("busy")]), node("n2")]
    snap = snapshot(nodes)
    p = pod(affinity=preferred_nodes((7, [expr("fast", "In", "yes")])))
    scoring = framework.prepare_scores(p, snap, plugins.SCORE_PROFILE)
    assert scoring is not None
    assert {plugin.name for plugin, _, _ in scoring.active} == {"TaintToleration", "NodeAffinity"}
    assert scoring.scores(nodes) == {"n1": 200, "n2": 300}
    assert scoring.rank(["n1", "n2"]) == {"n1": 200, "n2": 300}
    swapped = [(TaintToleration(), 2), (NodeAffinity(), 3)]
    scoring = framework.prepare_scores(p, snap, swapped)
    assert scoring is not None and scoring.scores(nodes) == {"n1": 300, "n2": 200}


def test_a_pod_that_prefers_nothing_is_not_ranked():
    nodes = [node("n1", {"zone": "a"}), node("n2", {"zone": "b"})]
    snap = snapshot(nodes, pod("placed", {"app": "x"}, bound_to="n1"))
    scoring = framework.prepare_scores(pod(labels={"app": "x"}), snap, plugins.SCORE_PROFILE)
    # Only TaintToleration runs (the node's side: it never skips, as kube's); with no PreferNoSchedule taint every
    # node scores alike, so there is no preference.
    assert scoring is not None and [plugin.name for plugin, _, _ in scoring.active] == ["TaintToleration"]
    assert scoring.rank(["n1", "n2"]) == {}
    assert scoring.rank(["n1"]) == {}, "one node is no choice"
    # A caller that knows no node has such a taint leaves TaintToleration out: then nothing is scored at all.
    assert framework.prepare_scores(pod(labels={"app": "x"}), snap, plugins.SCORE_PROFILE, {"TaintToleration"}) is None


# ---- the allocator --------------------------------------------------------------------------------------------------
def gpus(n: int, island: str = "default") -> tuple[Device, ...]:
    return tuple(Device(i, island) for i in range(n))


def test_a_preference_ranks_after_the_topology_preference_and_before_the_strategy():
    nodes = [Node("a", gpus(2)), Node("b", gpus(4))]
    request = Request(count=2)
    assert allocator.allocate(request, nodes).node == "a", "BestFit packs: a is left with no free GPU"
    chosen = allocator.allocate(request, nodes, preference={"b": 10})
    assert isinstance(chosen, allocator.Allocation) and chosen.node == "b"
    assert chosen.message.endswith("; the pod's preferred rules score it 10")
    # Topology first: only a's two GPUs are one island.
    split = [Node("a", gpus(2, "x")), Node("b", (Device(0, "x"), Device(1, "y"), Device(2, "z"), Device(3, "w")))]
    topology = Request(count=2, topology="Preferred")
    assert allocator.allocate(topology, split, preference={"b": 10}).node == "a"


def test_the_preference_function_is_asked_once_about_the_nodes_that_can_take_the_claim_now():
    asked: list[list[str]] = []

    def prefer(names):
        asked.append(sorted(names))
        return {"c": 1}

    nodes = [Node("a", gpus(2)), Node("b", gpus(2)), Node("c", gpus(2)), Node("d", gpus(1)), Node("e", gpus(2))]
    chosen = allocator.allocate(
        Request(count=2),
        nodes,
        holdings=[Holding("b", (0,))],
        reserved={"e": "ns/waiter"},
        preference=prefer,
    )
    assert chosen.node == "c"
    assert asked == [["a", "c"]], "b is busy, d too small, e kept for a waiter: kube scores only feasible nodes"


def test_alike_nodes_with_different_preferences_are_told_apart():
    shared = gpus(2)  # one devices tuple for both: the allocator treats such nodes as one state
    nodes = [Node("a", shared), Node("b", shared)]
    assert allocator.allocate(Request(count=1), nodes).node == "a"
    assert allocator.allocate(Request(count=1), nodes, preference={"b": 1}).node == "b"
    assert allocator.allocate(Request(count=1), nodes, preference=lambda names: {"b": 1}).node == "b"


NODE_NAMES = ("n0", "n1", "n2", "n3", "n4")
INVENTORIES = st.lists(
    st.tuples(st.integers(1, 4), st.sampled_from(["x", "y"]), st.booleans()), min_size=1, max_size=len(NODE_NAMES)
)


@settings(max_examples=300)
@given(
    inventory=INVENTORIES,
    held=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=6),
    count=st.integers(1, 4),
    strategy=st.sampled_from(["BestFit", "LeastUtilized", "RoundRobin"]),
    topology=st.sampled_from(["Ignore", "Preferred", "Required"]),
    policy=st.sampled_from(["contiguous", "spread", "preferIds"]),
    cursor=st.none() | st.sampled_from(NODE_NAMES),
    same=st.integers(-5, 500),
    shared=st.booleans(),
)
def test_without_preferences_or_with_one_score_everywhere_the_choice_is_unchanged(
    inventory, held, count, strategy, topology, policy, cursor, same, shared
):
    """No preferred rules (None, an empty preference, or the same score for every node, which is what a pod with
    no preferred rule gets) leave every decision, its node, GPUs and message, as it was."""
    common = gpus(4)
    nodes = [
        Node(
            NODE_NAMES[i],
            common
            if shared and size == 4
            else tuple(Device(j, island if j % 2 else "x", healthy=ok) for j in range(size)),
        )
        for i, (size, island, ok) in enumerate(inventory)
    ]
    holdings = [Holding(NODE_NAMES[n], (g,)) for n, g in held if n < len(nodes)]
    request = Request(count=count, strategy=strategy, topology=topology, policy=policy, prefer_ids=(1, 0))
    before = allocator.allocate(request, nodes, holdings, cursor=cursor)
    assert allocator.allocate(request, nodes, holdings, cursor=cursor, preference={}) == before
    assert (
        allocator.allocate(request, nodes, holdings, cursor=cursor, preference=dict.fromkeys(NODE_NAMES, same))
        == before
    )
    assert (
        allocator.allocate(request, nodes, holdings, cursor=cursor, preference=lambda names: dict.fromkeys(names, same))
        == before
    )
    scoring = framework.prepare_scores(pod(), snapshot([node(n.name) for n in nodes]), plugins.SCORE_PROFILE)
    assert scoring is not None
    assert allocator.allocate(request, nodes, holdings, cursor=cursor, preference=scoring.rank) == before


# ---- the claim path ------------------------------------------------------------------------------------------------
class _Client:
    """Answers nothing: ClaimPath.choose reads only its caches and writes nothing."""

    async def get(self, path: str, **_params: Any) -> Any:
        raise AssertionError(f"unexpected GET {path}")


def _scheduler(nodes: list[dict[str, Any]]) -> Scheduler:
    """A scheduler whose caches hold `nodes`, each with a GpuNodeStatus of two GPUs, and GpuClaim ns/c (one GPU)."""
    s = Scheduler(_Client(), SchedulerConfig())  # type: ignore[arg-type]
    for n in nodes:
        s.nodes._apply({"type": "ADDED", "object": n})
        name = n["metadata"]["name"]
        status = {
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"nodeName": name},
            "status": {"devices": [{"id": 0, "health": "Healthy"}, {"id": 1, "health": "Healthy"}]},
        }
        s.claim_path.statuses._apply({"type": "ADDED", "object": status})
    claim = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.GPU_CLAIM_KIND,
        "metadata": {"name": "c", "namespace": "ns", "uid": "uid-c", "generation": 1},
        "spec": {"devices": {"count": 1}},
    }
    s.claim_path.claims._apply({"type": "ADDED", "object": claim})
    return s


def _claim_path_choice(p: dict[str, Any], nodes: list[dict[str, Any]], *placed_pods: dict[str, Any]) -> str:
    """The node ClaimPath.choose gives pod `p` (naming GpuClaim c, one GPU) among `nodes`, each with two free GPUs."""
    s = _scheduler(nodes)
    for other in placed_pods:
        s.cache.observe(other["metadata"]["uid"], fit.footprint(other))
    chosen = s.claim_path.choose(p, "c", s.nodes.cache, s.cache.fork())
    assert not isinstance(chosen, str), chosen
    return chosen[0].node


def test_the_claim_path_ranks_gpu_nodes_by_the_pods_preferred_rules():
    async def scenario() -> None:
        nodes = [node("g1", {"tier": "slow", "zone": "a"}), node("g2", {"tier": "fast", "zone": "b"})]
        assert _claim_path_choice(pod(), nodes) == "g1", "without preferences: BestFit's tie goes to the name"
        fast = pod(affinity=preferred_nodes((1, [expr("tier", "In", "fast")])))
        assert _claim_path_choice(fast, nodes) == "g2", "preferred node affinity"
        tainted = [node("g1", taints=[taint("noisy")]), node("g2")]
        assert _claim_path_choice(pod(), tainted) == "g2", "a PreferNoSchedule taint"
        near = pod(labels=S1, affinity={"podAffinity": {PREFERRED: [weighted_term(1, "zone", {"app": "db"})]}})
        assert _claim_path_choice(near, nodes, pod("db", {"app": "db"}, bound_to="g2")) == "g2", "pod affinity"
        spread = pod(labels={"foo": ""}, topologySpreadConstraints=[soft_spread("zone")])
        assert _claim_path_choice(spread, nodes, *placed(1, "g1")) == "g2", "ScheduleAnyway topology spread"

    asyncio.run(scenario())


def test_the_claim_path_scores_a_pod_that_prefers_nothing_only_while_a_node_has_a_prefer_no_schedule_taint():
    async def scenario() -> None:
        s = _scheduler([node("g1"), node("g2")])
        snap = s.cache.snapshot
        assert s.claim_path._scored_alike(snap) == {"TaintToleration"}
        assert framework.prepare_scores(pod(), snap, plugins.SCORE_PROFILE, s.claim_path._scored_alike(snap)) is None
        s.nodes._apply({"type": "MODIFIED", "object": node("g1", taints=[taint("noisy")])})
        assert s.claim_path._scored_alike(snap) == frozenset(), "a node's change is seen"
        s.nodes._apply({"type": "MODIFIED", "object": node("g1")})
        assert s.claim_path._scored_alike(snap) == {"TaintToleration"}

    asyncio.run(scenario())
