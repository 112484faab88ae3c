"""gpu_scheduling.board.forms: the create form's JSON in, the objects out; every bad field named with what was
expected, all problems at once, and nothing but a FormError for any input (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_scheduling import constants, gpumap
from gpu_scheduling.board import forms
from gpu_scheduling.claims import objects

SETTINGS = forms.Settings(scheduler_name="gpu-scheduler", pod_image="check:1", namespaces=("default", "team-a"))
LABELS = {constants.BOARD_CREATED_LABEL: constants.BOARD_NAME}


def claim_form(**fields: Any) -> dict[str, Any]:
    form: dict[str, Any] = {"kind": "claim", "namespace": "default", "name": "demo-1", "count": 1}
    form.update(fields)
    return form


def sts_form(**fields: Any) -> dict[str, Any]:
    form: dict[str, Any] = {
        "kind": "statefulset",
        "namespace": "default",
        "name": "demo-ss",
        "replicas": 2,
        "map": "0=node1:0\n1=node2:1",
    }
    form.update(fields)
    return form


def refused(form: Any, status: int = 422) -> forms.FormError:
    with pytest.raises(forms.FormError) as caught:
        forms.build(form, SETTINGS)
    assert caught.value.status == status, caught.value.problems
    return caught.value


def assert_restricted(spec: dict[str, Any]) -> None:
    """The pod spec of every object the board makes: restricted, NODE_NAME from spec.nodeName, its scheduler."""
    assert spec["schedulerName"] == "gpu-scheduler"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    assert container["image"] == "check:1"
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["env"] == [
        {"name": constants.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]


# ---- a claim ----------------------------------------------------------------------------------------------------


def test_a_claim_makes_a_gpuclaim_then_a_pod_naming_it_both_labelled():
    workload = forms.build(claim_form(), SETTINGS)
    assert (workload.kind, workload.namespace, workload.name) == ("claim", "default", "demo-1")
    claim, pod = workload.objects
    assert (claim.resource, claim.kind, claim.name) == ("gpuclaims", "GpuClaim", "demo-1")
    assert (pod.resource, pod.kind, pod.name) == ("pods", "Pod", "demo-1")
    want_labels = {constants.BOARD_CREATED_LABEL: "gpu-board", constants.BOARD_WORKLOAD_LABEL: "demo-1"}
    assert claim.body["apiVersion"] == constants.API_VERSION
    assert claim.body["metadata"] == {"name": "demo-1", "namespace": "default", "labels": want_labels}
    assert claim.body["spec"] == {"devices": {"count": 1, "policy": "contiguous", "exclusivity": "Exclusive"}}
    assert pod.body["metadata"]["labels"] == want_labels
    assert pod.body["metadata"]["annotations"] == {constants.CLAIM_ANNOTATION: "demo-1"}
    assert_restricted(pod.body["spec"])


def test_every_claim_field_reaches_the_spec_the_allocator_reads():
    form = claim_form(
        count="2",
        policy="contiguous",
        preferIds=[3, 1],
        exclusivity="Shared",
        topologyMode="Required",
        minBandwidthGBps=600,
        selector={"gpu-type": "a100", "example.com/zone": "a"},
        strategy="LeastUtilized",
        minMemoryMiB="16384",
    )
    claim = forms.build(form, SETTINGS).objects[0].body
    request = objects.request_from_claim(claim)
    assert (request.count, request.policy, request.prefer_ids, request.exclusivity) == (
        2,
        "preferIds",
        (3, 1),
        "Shared",
    )
    assert (request.topology, request.min_bandwidth_gbps, request.strategy) == ("Required", 600, "LeastUtilized")
    assert request.match_labels == {"gpu-type": "a100", "example.com/zone": "a"}
    assert request.min_memory_mib == 16384


def test_the_page_s_text_forms_of_lists_are_read_too():
    claim = forms.build(claim_form(preferIds="0, 1", selector="gpu-type=a100, rack=r1"), SETTINGS).objects[0].body
    assert claim["spec"]["devices"]["preferIds"] == [0, 1]
    assert claim["spec"]["selector"] == {"matchLabels": {"gpu-type": "a100", "rack": "r1"}}


def test_empty_optional_fields_are_absent_and_leave_the_defaults():
    form = claim_form(
        policy="", preferIds="", exclusivity="", topologyMode="", minBandwidthGBps="", selector="", strategy=""
    )
    form["minMemoryMiB"] = None
    assert forms.build(form, SETTINGS).objects[0].body["spec"] == {
        "devices": {"count": 1, "policy": "contiguous", "exclusivity": "Exclusive"}
    }


def test_the_other_kind_s_fields_are_ignored():
    # The page may send every input of the form whatever the kind.
    workload = forms.build(claim_form(replicas="", map="0=node1:0"), SETTINGS)
    assert [o.kind for o in workload.objects] == ["GpuClaim", "Pod"]


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"count": "x"}, "count", 'count must be an integer from 1 to 64, got "x"'),
        ({"count": 0}, "count", "got 0"),
        ({"count": 65}, "count", "from 1 to 64"),
        ({"count": True}, "count", "got true"),
        ({"count": 1.5}, "count", "got 1.5"),
        ({"count": None}, "count", "got nothing"),
        ({"count": 10**5000}, "count", "an integer of"),
        ({"policy": "random"}, "policy", 'policy must be one of contiguous, spread, preferIds, got "random"'),
        ({"policy": "preferIds"}, "policy", "needs preferIds"),
        ({"preferIds": [0], "policy": "spread"}, "preferIds", "spread would ignore them"),
        ({"preferIds": [0, 0]}, "preferIds", "GPU 0 twice"),
        ({"preferIds": [-1]}, "preferIds", "from 0 to 9999, got -1"),
        ({"preferIds": "0,a"}, "preferIds", 'got "a"'),
        ({"preferIds": {"a": 1}}, "preferIds", "got an object"),
        ({"preferIds": list(range(65))}, "preferIds", "at most 64"),
        ({"exclusivity": "MIG"}, "exclusivity", "one of Exclusive, Shared"),
        ({"topologyMode": "required"}, "topologyMode", "one of Ignore, Preferred, Required"),
        ({"minBandwidthGBps": 600}, "minBandwidthGBps", "needs topologyMode Preferred or Required"),
        ({"minBandwidthGBps": -1, "topologyMode": "Preferred"}, "minBandwidthGBps", "from 0 to 1000000"),
        ({"selector": ["a"]}, "selector", "got an array"),
        ({"selector": "gpu-type"}, "selector", 'key=value, got "gpu-type"'),
        ({"selector": {"bad key": "x"}}, "selector", "not a label name"),
        ({"selector": {"Bad_/x": "x"}}, "selector", "not a DNS subdomain"),
        ({"selector": {"k": 1}}, "selector", "must be a string, got 1"),
        ({"selector": {"k": "-x"}}, "selector", "not a label value"),
        ({"selector": {f"k{i}": "v" for i in range(17)}}, "selector", "at most 16"),
        ({"strategy": "Fastest"}, "strategy", "one of BestFit, LeastUtilized, RoundRobin"),
        ({"minMemoryMiB": 2**31}, "minMemoryMiB", "from 0 to 2147483647"),
        ({"name": "Demo"}, "name", "DNS label"),
        ({"name": "x" * 64}, "name", "at most 63"),
        ({"name": None}, "name", "name is required"),
        ({"kind": "deployment"}, "kind", 'kind must be one of claim, statefulset, got "deployment"'),
        ({"kind": None}, "kind", "got nothing"),
        ({"extra": 1}, "extra", 'unknown field "extra"'),
    ],
)
def test_a_bad_claim_field_is_named_with_what_was_expected(fields, field, fragment):
    error = refused(claim_form(**fields))
    assert error.field == field, error.problems
    assert fragment in error.message


def test_every_problem_is_reported_at_once_the_first_as_the_field():
    error = refused(claim_form(count="x", policy="nope", exclusivity=3, strategy="Fast"))
    assert [field for field, _ in error.problems] == ["count", "policy", "exclusivity", "strategy"]
    assert error.field == "count"


def test_a_message_quotes_hostile_text_bounded_and_escaped():
    error = refused(claim_form(policy="\n\x1b[31m" + "x" * 10_000))
    assert len(error.message) < 300
    assert "\n" not in error.message and "\x1b" not in error.message


# ---- a StatefulSet --------------------------------------------------------------------------------------------


def test_a_statefulset_carries_the_map_and_the_labels_on_its_template():
    (sts,) = forms.build(sts_form(), SETTINGS).objects
    assert (sts.resource, sts.kind, sts.name) == ("statefulsets", "StatefulSet", "demo-ss")
    want_labels = {constants.BOARD_CREATED_LABEL: "gpu-board", constants.BOARD_WORKLOAD_LABEL: "demo-ss"}
    body = sts.body
    assert body["metadata"]["labels"] == want_labels
    assert body["spec"]["replicas"] == 2
    assert body["spec"]["selector"] == {"matchLabels": want_labels}
    template = body["spec"]["template"]
    assert template["metadata"]["labels"] == want_labels
    assert gpumap.parse(template["metadata"]["annotations"][constants.MAP_ANNOTATION]).entries == {
        0: gpumap.Entry(0, "node1", (0,)),
        1: gpumap.Entry(1, "node2", (1,)),
    }
    assert_restricted(template["spec"])


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"replicas": 0}, "replicas", "replicas must be an integer from 1 to 64, got 0"),
        ({"replicas": "many"}, "replicas", 'got "many"'),
        ({"map": ""}, "map", "map is required"),
        ({"map": 7}, "map", "map must be a string"),
        ({"map": "0=node1"}, "map", "line 1"),
        ({"map": "0=node1:0"}, "map", "no entry for pod index 1 of 2 replicas"),
        ({"name": "s" * 53}, "name", "at most 52"),
    ],
)
def test_a_bad_statefulset_field_is_named(fields, field, fragment):
    error = refused(sts_form(**fields))
    assert error.field == field, error.problems
    assert fragment in error.message


# ---- where, and what is not a form ----------------------------------------------------------------------------


def test_a_namespace_the_board_was_not_given_is_forbidden_naming_the_allowed_ones():
    error = refused(claim_form(namespace="kube-system", count="x"), status=403)
    assert error.field == "namespace"
    assert "kube-system" in error.message and "default, team-a" in error.message


@pytest.mark.parametrize("namespace", [None, "", 3, "Bad", "a" * 64])
def test_a_namespace_that_is_no_namespace_name_is_a_bad_field(namespace):
    assert refused(claim_form(namespace=namespace)).field == "namespace"


@pytest.mark.parametrize(("body", "shown"), [([], "an array"), ("x", "a string"), (None, "null"), (3, "a number")])
def test_a_body_that_is_not_an_object_is_named_as_the_body(body, shown):
    error = refused(body)
    assert error.field == "body" and shown in error.message


def test_the_selector_of_a_workload_names_both_labels():
    assert forms.selector("demo") == "gpu.scheduling/created-by=gpu-board,gpu.scheduling/board-workload=demo"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from([*forms.COMMON_KEYS, *forms.CLAIM_KEYS, *forms.STATEFULSET_KEYS])
FORMS = st.dictionaries(FIELDS, JSON_VALUES | st.sampled_from(["claim", "statefulset", "default", "1", "0,1"]))


@settings(max_examples=300)
@given(FORMS | JSON_VALUES)
def test_any_json_is_objects_or_a_form_error_naming_a_field(form):
    try:
        workload = forms.build(form, SETTINGS)
    except forms.FormError as exc:
        assert exc.status in (403, 422)
        assert exc.field and exc.message
        assert all(f and m for f, m in exc.problems)
        return
    json.dumps([o.body for o in workload.objects])  # plain JSON
    for obj in workload.objects:
        assert obj.body["metadata"]["namespace"] in SETTINGS.namespaces
        assert obj.body["metadata"]["labels"][constants.BOARD_CREATED_LABEL] == constants.BOARD_NAME
