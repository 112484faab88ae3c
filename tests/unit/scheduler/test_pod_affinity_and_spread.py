"""plugins/inter_pod_affinity.py and plugins/pod_topology_spread.py on plain data, through the profile
(framework.prepare with plugins.PROFILE) as the scheduler runs them: each rule both fits and refuses. The
differential test (features/fit) compares them with kube-scheduler on a real control plane."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.scheduler import decision, fit, framework, plugins
from gpu_scheduling.scheduler.cache import Cache
from gpu_scheduling.scheduler.plugins import node_affinity, pod_topology_spread
from tests.unit.scheduler import labelled_pod as pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    labels = {HOST: name}
    if zone is not None:
        labels[ZONE] = zone
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


NODES = {n["metadata"]["name"]: n for n in (node("a1", "a"), node("a2", "a"), node("b1", "b"), node("bare"))}
NAMESPACES = {
    "ns": {"metadata": {"name": "ns", "labels": {"team": "ml"}}},
    "other": {"metadata": {"name": "other", "labels": {"team": "web"}}},
}


def term(key: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": labels}, **extra}


def anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def spread(key: str, labels: dict[str, str] | None, skew: int = 1, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", **extra}
    if labels is not None:
        c["labelSelector"] = {"matchLabels": labels}
    return c


def snapshot(*placed: dict[str, Any], nodes: dict[str, Any] | None = None) -> framework.Snapshot:
    cache = Cache(nodes=nodes or NODES, namespaces=NAMESPACES)
    for p in placed:
        cache.observe(p["metadata"]["uid"], fit.footprint(p))
    return cache.snapshot


def verdicts(p: dict[str, Any], snap: framework.Snapshot) -> dict[str, str | None]:
    """Node -> why the pod does not fit it (None: it fits)."""
    attempt = framework.prepare(p, snap, plugins.PROFILE)
    assert isinstance(attempt, framework.Cycle), attempt
    return {name: attempt.problem(n) for name, n in snap.nodes.items()}


def fitting(p: dict[str, Any], snap: framework.Snapshot) -> set[str]:
    return {name for name, why in verdicts(p, snap).items() if why is None}


# ---- InterPodAffinity -------------------------------------------------------------------------------------------
def test_anti_affinity_keeps_the_pod_out_of_a_domain_with_a_matching_pod():
    web = pod("web-0", {"app": "web"}, bound_to="a1")
    p = pod("web-1", {"app": "web"}, affinity=anti(term(ZONE, {"app": "web"})))
    said = verdicts(p, snapshot(web))
    assert said["b1"] is None and said["bare"] is None, "no zone label: no domain to share"
    assert "didn't match pod anti-affinity rules" in str(said["a2"]), said
    p = pod("web-1", {"app": "web"}, affinity=anti(term(HOST, {"app": "web"})))
    assert fitting(p, snapshot(web)) == {"a2", "b1", "bare"}


def test_an_existing_pods_anti_affinity_keeps_the_incoming_pod_out():
    loner = pod("loner", {"app": "loner"}, bound_to="a1", affinity=anti(term(ZONE, {"app": "db"})))
    said = verdicts(pod("db-0", {"app": "db"}), snapshot(loner))
    assert "existing pods anti-affinity" in str(said["a2"]), said
    assert said["b1"] is None and said["bare"] is None
    assert fitting(pod("web", {"app": "web"}), snapshot(loner)) == set(NODES), "the term does not match it"


def test_affinity_wants_a_matching_pod_in_the_domain_and_the_topology_label():
    cache_pod = pod("cache", {"app": "cache"}, bound_to="a2")
    p = pod("user", {"app": "user"}, affinity=affinity(term(ZONE, {"app": "cache"})))
    said = verdicts(p, snapshot(cache_pod))
    assert {n for n, why in said.items() if why is None} == {"a1", "a2"}
    assert "didn't match pod affinity rules" in str(said["b1"])
    assert "has no topology.kubernetes.io/zone label" in str(said["bare"])


def test_the_first_pod_of_a_group_with_affinity_to_itself_may_go_where_the_labels_are():
    p = pod("first", {"app": "group"}, affinity=affinity(term(ZONE, {"app": "group"})))
    assert fitting(p, snapshot()) == {"a1", "a2", "b1"}
    stranger = pod("first", {"app": "other"}, affinity=affinity(term(ZONE, {"app": "group"})))
    assert fitting(stranger, snapshot()) == set(), "it does not match its own terms: it waits for the group"


def test_a_terms_namespaces_decide_whose_pods_count():
    elsewhere = pod("web-x", {"app": "web"}, namespace="other", bound_to="a1")
    own_namespace = pod("p", {"app": "web"}, affinity=anti(term(ZONE, {"app": "web"})))
    assert fitting(own_namespace, snapshot(elsewhere)) == set(NODES), "the term is about its own namespace only"
    listed = pod("p", {"app": "web"}, affinity=anti(term(ZONE, {"app": "web"}, namespaces=["other"])))
    assert fitting(listed, snapshot(elsewhere)) == {"b1", "bare"}
    by_label = term(ZONE, {"app": "web"}, namespaceSelector={"matchLabels": {"team": "web"}})
    assert fitting(pod("p", {"app": "web"}, affinity=anti(by_label)), snapshot(elsewhere)) == {"b1", "bare"}
    every = term(ZONE, {"app": "web"}, namespaceSelector={})
    assert fitting(pod("p", {"app": "web"}, affinity=anti(every)), snapshot(elsewhere)) == {"b1", "bare"}


def test_a_pod_without_terms_and_no_anti_affinity_around_costs_nothing():
    attempt = framework.prepare(
        pod("p", {"app": "web"}), snapshot(pod("q", {"app": "web"}, bound_to="a1")), plugins.PROFILE
    )
    assert isinstance(attempt, framework.Cycle) and not attempt.applies("InterPodAffinity")
    assert plugins.asks_only_a_place(attempt)


def test_members_placed_on_a_trial_count_for_each_other():
    cache = Cache(nodes=NODES, namespaces=NAMESPACES)
    trial = cache.fork()
    first = pod("m-0", {"gang": "g"}, affinity=anti(term(HOST, {"gang": "g"})))
    assert trial.assume(first, Hold("m-0", "ns/m-0", "a1", ())) == []
    second = pod("m-1", {"gang": "g"}, affinity=anti(term(HOST, {"gang": "g"})))
    assert "a1" not in fitting(second, trial.snapshot)
    assert "a1" in fitting(second, cache.snapshot), "the live cache never saw the trial"


def test_an_unreadable_term_refuses_the_pod_naming_the_field():
    p = pod("p", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": 3}]}})
    refusal = framework.prepare(p, snapshot(), plugins.PROFILE)
    assert isinstance(refusal, framework.PodRefusal)
    assert "requiredDuringSchedulingIgnoredDuringExecution[0]" in refusal.message


# ---- PodTopologySpread ------------------------------------------------------------------------------------------
def test_a_zone_spread_refuses_the_fuller_zone():
    placed = [pod(f"w{i}", {"app": "w"}, bound_to=n) for i, n in enumerate(("a1", "a2"))]
    p = pod("w9", {"app": "w"}, topologySpreadConstraints=[spread(ZONE, {"app": "w"})])
    said = verdicts(p, snapshot(*placed))
    assert said["b1"] is None
    assert "didn't match pod topology spread constraints" in str(said["a1"]), said
    assert "(missing required label)" in str(said["bare"])
    assert fitting(
        pod("w9", {"app": "w"}, topologySpreadConstraints=[spread(ZONE, {"app": "w"}, skew=3)]), snapshot(*placed)
    ) == {"a1", "a2", "b1"}


def test_the_pod_itself_assumed_on_a_node_is_not_counted_again():
    placed = [pod("w0", {"app": "w"}, bound_to="a1"), pod("w9", {"app": "w"}, bound_to="b1")]
    p = pod("w9", {"app": "w"}, topologySpreadConstraints=[spread(ZONE, {"app": "w"})])
    # w9 counted on b1 (an earlier attempt's assumption): judged again, it is zone b's only pod no longer
    assert fitting(p, snapshot(*placed)) == {"b1"}


_KINDS = ({"app": "w"}, {"app": "w", "rev": "2"}, {"app": "v"}, {})
_SELECTORS = (*_KINDS, None)  # {}: an empty selector (counts none); None: no labelSelector at all


@settings(max_examples=150, deadline=None)
@given(
    placed=st.lists(
        st.tuples(
            st.sampled_from(sorted(NODES)),
            st.sampled_from(range(len(_KINDS))),
            st.sampled_from(("ns", "other")),
            st.booleans(),
        ),
        max_size=12,
    ),
    selectors=st.lists(st.sampled_from(_SELECTORS), min_size=1, max_size=2),
    key=st.sampled_from((ZONE, HOST)),
)
def test_spread_counts_equal_a_recount_of_every_pod(placed, selectors, key):
    """pod_topology_spread._counts, which reads the usage's label groups, against counting pod by pod."""
    pods = []
    for i, (where, kind, ns, ending) in enumerate(placed):
        body = pod(f"p{i}", dict(_KINDS[kind]), namespace=ns, bound_to=where)
        if ending:
            body["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
        pods.append(body)
    snap = snapshot(*pods)
    constraints = pod_topology_spread.read(
        pod("in", {}, topologySpreadConstraints=[spread(key, chosen) for chosen in selectors])
    )
    got = pod_topology_spread._counts(constraints, node_affinity.read(pod("in")), [], "ns", "in", snap)
    for c, counts in zip(constraints, got, strict=True):
        expected: dict[str, int] = {}
        for name, n in snap.nodes.items():
            labels = n["metadata"]["labels"]
            if key not in labels:
                continue
            expected.setdefault(labels[key], 0)
            expected[labels[key]] += sum(
                1
                for b in pods
                if b["spec"]["nodeName"] == name
                and b["metadata"]["namespace"] == "ns"
                and "deletionTimestamp" not in b["metadata"]
                and not c.selector.empty
                and c.selector.matches(b["metadata"]["labels"])
            )
        assert counts == expected


def test_min_domains_counts_missing_domains_as_empty():
    placed = [pod("w0", {"app": "w"}, bound_to="a1"), pod("w1", {"app": "w"}, bound_to="b1")]
    plain = pod("w9", {"app": "w"}, topologySpreadConstraints=[spread(ZONE, {"app": "w"})])
    assert fitting(plain, snapshot(*placed)) == {"a1", "a2", "b1"}
    wants_three = pod("w9", {"app": "w"}, topologySpreadConstraints=[spread(ZONE, {"app": "w"}, minDomains=3)])
    assert fitting(wants_three, snapshot(*placed)) == set(), "two zones of three: the third counts as empty"


def test_only_the_pods_namespace_and_live_pods_count():
    placed = [
        pod("x", {"app": "w"}, namespace="other", bound_to="a1"),
        {
            **pod("y", {"app": "w"}, bound_to="a2"),
            "metadata": {**pod("y", {"app": "w"})["metadata"], "deletionTimestamp": "2026-11-28T00:00:00Z"},
        },
    ]
    p = pod("w9", {"app": "w"}, topologySpreadConstraints=[spread(ZONE, {"app": "w"})])
    assert fitting(p, snapshot(*placed)) == {"a1", "a2", "b1"}


def test_node_inclusion_policies_decide_which_domains_count():
    nodes = {**NODES, "c1": node("c1", "c", taints=[{"key": "k", "effect": "NoSchedule"}])}
    placed = [pod("w0", {"app": "w"}, bound_to="a1"), pod("w1", {"app": "w"}, bound_to="b1")]
    honour_taints = spread(ZONE, {"app": "w"}, nodeTaintsPolicy="Honor")
    p = pod("w9", {"app": "w"}, topologySpreadConstraints=[honour_taints], tolerations=[{"operator": "Exists"}])
    assert fitting(p, snapshot(*placed, nodes=nodes)) == {"c1"}, "c1 tolerated: its empty zone is the fewest"
    p = pod("w9", {"app": "w"}, topologySpreadConstraints=[honour_taints])
    assert fitting(p, snapshot(*placed, nodes=nodes)) == {"a1", "a2", "b1"}, "c untolerated: not a domain"
    ignore_selector = spread(ZONE, {"app": "w"}, nodeAffinityPolicy="Ignore")
    selected = {"nodeSelector": {ZONE: "a"}}
    assert fitting(
        pod("w9", {"app": "w"}, topologySpreadConstraints=[ignore_selector], **selected), snapshot(*placed)
    ) == {"a1", "a2"}
    honour = spread(ZONE, {"app": "w"})
    assert fitting(pod("w9", {"app": "w"}, topologySpreadConstraints=[honour], **selected), snapshot(*placed)) == {
        "a1",
        "a2",
    }
    placed.append(pod("w2", {"app": "w"}, bound_to="a2"))
    assert (
        fitting(pod("w9", {"app": "w"}, topologySpreadConstraints=[ignore_selector], **selected), snapshot(*placed))
        == set()
    ), "b counts"
    assert fitting(pod("w9", {"app": "w"}, topologySpreadConstraints=[honour], **selected), snapshot(*placed)) == {
        "a1",
        "a2",
    }, "only a counts"


def test_match_label_keys_narrow_the_selector_to_the_pods_own_values():
    placed = [pod(f"old{i}", {"app": "w", "rev": "1"}, bound_to="a1") for i in range(3)]
    keyed = spread(ZONE, {"app": "w"}, matchLabelKeys=["rev"])
    assert fitting(pod("new", {"app": "w", "rev": "2"}, topologySpreadConstraints=[keyed]), snapshot(*placed)) == {
        "a1",
        "a2",
        "b1",
    }
    assert fitting(pod("new", {"app": "w", "rev": "1"}, topologySpreadConstraints=[keyed]), snapshot(*placed)) == {"b1"}


def test_schedule_anyway_is_not_judged_and_an_absent_selector_matches_nothing():
    placed = [pod(f"w{i}", {"app": "w"}, bound_to="a1") for i in range(3)]
    anyway = {**spread(ZONE, {"app": "w"}), "whenUnsatisfiable": "ScheduleAnyway"}
    attempt = framework.prepare(
        pod("w9", {"app": "w"}, topologySpreadConstraints=[anyway]), snapshot(*placed), plugins.PROFILE
    )
    assert isinstance(attempt, framework.Cycle) and not attempt.applies("PodTopologySpread")
    assert fitting(pod("w9", {"app": "w"}, topologySpreadConstraints=[spread(ZONE, None)]), snapshot(*placed)) == {
        "a1",
        "a2",
        "b1",
    }


def test_an_unreadable_constraint_refuses_the_pod_naming_the_field():
    p = pod("p", topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}])
    refusal = framework.prepare(p, snapshot(), plugins.PROFILE)
    assert isinstance(refusal, framework.PodRefusal) and "topologySpreadConstraints[0].maxSkew" in refusal.message


def test_asks_for_domains_names_the_rules_other_nodes_pods_can_change():
    assert decision.asks_for_domains(pod("p", affinity=anti(term(ZONE, {"a": "b"}))))
    assert decision.asks_for_domains(pod("p", affinity=affinity(term(ZONE, {"a": "b"}))))
    assert decision.asks_for_domains(pod("p", topologySpreadConstraints=[spread(ZONE, {"a": "b"})]))
    anyway = {**spread(ZONE, {"a": "b"}), "whenUnsatisfiable": "ScheduleAnyway"}
    assert not decision.asks_for_domains(pod("p", topologySpreadConstraints=[anyway]))
    assert not decision.asks_for_domains(pod("p"))
    assert not decision.asks_for_domains({"spec": "x"})


def test_an_empty_selector_counts_no_pod_but_the_pod_itself():
    """kube-scheduler counts no placed pod for `labelSelector: {}` (and the pod itself, which it matches): such a
    constraint never refuses a node (found by features/fit's differential)."""
    placed = [pod(f"w{i}", {"app": "w"}, bound_to="a1") for i in range(3)]
    empty = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    assert fitting(pod("w9", {"app": "w"}, topologySpreadConstraints=[empty]), snapshot(*placed)) == {"a1", "a2", "b1"}


def test_the_pods_own_affinity_is_judged_before_the_placed_pods_anti_affinity():
    """kube's order (its reason names the first broken: found by features/fit's differential)."""
    loner = pod("loner", {"app": "loner"}, bound_to="a1", affinity=anti(term(HOST, {"app": "db"})))
    p = pod("db", {"app": "db"}, affinity=affinity(term(HOST, {"app": "cache"})))
    said = verdicts(p, snapshot(loner, pod("cache", {"app": "cache"}, bound_to="b1")))
    assert "didn't match pod affinity rules" in str(said["a1"]), said


def test_an_operator_of_the_wrong_type_refuses_the_pod_naming_the_field():
    """An operator that is not a string (a list, here) is a refusal naming it, not a crash (found by the fuzz)."""
    bad = {"topologyKey": ZONE, "labelSelector": {"matchExpressions": [{"key": "a", "operator": ["In"]}]}}
    refusal = framework.prepare(pod("p", affinity=anti(bad)), snapshot(), plugins.PROFILE)
    assert isinstance(refusal, framework.PodRefusal)
    assert "labelSelector.matchExpressions[0].operator" in refusal.message
