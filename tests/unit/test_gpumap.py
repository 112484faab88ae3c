"""The map grammar: table tests for every rule, round-trip and never-crash properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_scheduling import gpumap
from gpu_scheduling.gpumap import Entry

TAKE_HOME = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def test_take_home_map():
    m = gpumap.parse(TAKE_HOME)
    assert [(e.index, e.node, e.cuda_visible_devices) for e in m.entries.values()] == [
        (0, "node1", "0,1"),
        (1, "node2", "2"),
        (2, "node3", "0,1,2"),
        (3, "node4", "3"),
        (4, "node4", "3"),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0=node1:0", {0: Entry(0, "node1", (0,))}),
        ("  0 = node1 : 0 , 1  ", {0: Entry(0, "node1", (0, 1))}),
        ("\n\n0=node1:0\n   \n1=node2:1\n\n", {0: Entry(0, "node1", (0,)), 1: Entry(1, "node2", (1,))}),
        ("0=node1:0\r\n1=node2:1\r\n", {0: Entry(0, "node1", (0,)), 1: Entry(1, "node2", (1,))}),
        ("3=node4:3\n4=node4:3", {3: Entry(3, "node4", (3,)), 4: Entry(4, "node4", (3,))}),
        ("0=gpu-node.example.com:7", {0: Entry(0, "gpu-node.example.com", (7,))}),
        ("10=n:0,0", {10: Entry(10, "n", (0, 0))}),
    ],
)
def test_valid_maps(text, expected):
    assert dict(gpumap.parse(text).entries) == expected


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("0=node1", 1, "missing `:`"),
        ("node1:0", 1, "missing `=`"),
        ("=node1:0", 1, "missing index"),
        ("-1=node1:0", 1, "index '-1' is not a non-negative integer"),
        ("a=node1:0", 1, "index 'a' is not a non-negative integer"),
        ("0=:0", 1, "missing node name"),
        ("0=Node1:0", 1, "node 'Node1' is not a valid Kubernetes node name"),
        ("0=node_1:0", 1, "node 'node_1' is not a valid"),
        ("0=-node:0", 1, "node '-node' is not a valid"),
        ("0=node1:", 1, "missing gpu ids"),
        ("0=node1:0,", 1, "gpu id '(empty)' is not a non-negative integer"),
        ("0=node1:x", 1, "gpu id 'x' is not a non-negative integer"),
        ("0=node1:-1", 1, "gpu id '-1'"),
        ("0=node1:0\n0=node2:1", 2, "index 0 already given on line 1"),
        ("0=node1:0\n\nbroken", 3, "missing `=`"),
        ("", 1, "the map is empty"),
        ("  \n \n", 1, "the map is empty"),
    ],
)
def test_invalid_maps_name_the_line(text, line, fragment):
    with pytest.raises(gpumap.MapError) as info:
        gpumap.parse(text)
    assert any(p.line == line and fragment in p.reason for p in info.value.problems), info.value.problems
    assert f"line {line}" in str(info.value)


def test_every_problem_is_reported_together():
    with pytest.raises(gpumap.MapError) as info:
        gpumap.parse("0=node1:0\nbad line\n1=Node:0\n2=node3:x")
    assert sorted({p.line for p in info.value.problems}) == [2, 3, 4]


def test_node_name_length_limit():
    with pytest.raises(gpumap.MapError):
        gpumap.parse("0=" + "a" * 254 + ":0")
    assert gpumap.parse("0=" + ".".join(["a" * 63] * 3) + ":0")


@pytest.mark.parametrize(
    "meta, index",
    [
        ({"name": "gpu-scheduler-check-3"}, 3),
        ({"name": "web-0"}, 0),
        ({"name": "x-12", "labels": {"apps.kubernetes.io/pod-index": "4"}}, 4),
        ({"generateName": "job-", "labels": {"apps.kubernetes.io/pod-index": "0"}}, 0),
    ],
)
def test_pod_index(meta, index):
    assert gpumap.pod_index(meta) == index


@pytest.mark.parametrize(
    "meta, fragment",
    [
        ({"generateName": "job-"}, "has no name yet"),
        ({"name": "single"}, "does not end in `-<number>`"),
        ({"name": "x-1", "labels": {"apps.kubernetes.io/pod-index": "one"}}, "not a non-negative integer"),
    ],
)
def test_unresolvable_pod_index(meta, fragment):
    with pytest.raises(gpumap.PodIndexError, match=fragment):
        gpumap.pod_index(meta)


def test_entry_for_pod():
    meta = {"name": "c-2", "annotations": {"gpu-scheduling-map": TAKE_HOME}}
    assert gpumap.entry_for_pod(meta) == Entry(2, "node3", (0, 1, 2))
    assert gpumap.entry_for_pod({"name": "c-2"}) is None
    with pytest.raises(gpumap.PodIndexError, match=r"pod index 9 is not in .* \(indices in the map: 0, 1, 2, 3, 4\)"):
        gpumap.entry_for_pod({"name": "c-9", "annotations": {"gpu-scheduling-map": TAKE_HOME}})


node_names = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]{1,5})?\Z")
entries = st.dictionaries(
    st.integers(min_value=0, max_value=10_000),
    st.tuples(node_names, st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=8)),
    min_size=1,
    max_size=20,
)


@given(entries)
def test_encode_parse_round_trip(raw):
    m = gpumap.GpuMap({i: Entry(i, node, tuple(ids)) for i, (node, ids) in raw.items()})
    assert gpumap.parse(gpumap.encode(m)) == m


@given(entries, st.sampled_from(["\n", "\r\n"]), st.sampled_from(["", " ", "  "]))
def test_whitespace_and_line_endings_do_not_change_meaning(raw, newline, pad):
    text = newline.join(
        f"{pad}{i}{pad}={pad}{node}{pad}:{pad}{(pad + ',' + pad).join(map(str, ids))}{pad}" for i, (node, ids) in raw.items()
    )
    parsed = gpumap.parse(newline + text + newline)
    assert {i: (e.node, list(e.gpu_ids)) for i, e in parsed.entries.items()} == {i: (n, ids) for i, (n, ids) in raw.items()}


@given(st.text(max_size=300))
def test_random_text_never_crashes(text):
    try:
        gpumap.parse(text)
    except gpumap.MapError as exc:
        assert exc.problems and all(p.line >= 1 for p in exc.problems)


def test_parse_cached_parses_each_distinct_map_once():
    text = "0=node1:0\n1=node2:1\n"
    first = gpumap.parse_cached(text)
    assert first == gpumap.parse(text)
    assert gpumap.parse_cached(text) is first


def test_parse_cached_raises_a_fresh_error_with_every_problem_each_time():
    text = "0=node1:x\nbroken\n"
    errors = []
    for _ in range(2):
        with pytest.raises(gpumap.MapError) as info:
            gpumap.parse_cached(text)
        errors.append(info.value)
    assert errors[0] is not errors[1]
    assert [p.line for p in errors[1].problems] == [1, 2]
    assert str(errors[0]) == str(errors[1])
