"""The map grammar: table tests for every rule, round-trip and never-crash properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_scheduling import gpumap, podrequest
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
        f"{pad}{i}{pad}={pad}{node}{pad}:{pad}{(pad + ',' + pad).join(map(str, ids))}{pad}"
        for i, (node, ids) in raw.items()
    )
    parsed = gpumap.parse(newline + text + newline)
    assert {i: (e.node, list(e.gpu_ids)) for i, e in parsed.entries.items()} == {
        i: (n, ids) for i, (n, ids) in raw.items()
    }


@given(st.text(max_size=300))
def test_random_text_never_crashes(text):
    try:
        gpumap.parse(text)
    except gpumap.MapError as exc:
        assert exc.problems and all(p.line >= 1 for p in exc.problems)


def test_parse_cache_parses_each_distinct_map_once():
    text = "0=node1:0\n1=node2:1\n"
    maps = gpumap.ParseCache()
    first = maps.parse(text)
    assert first == gpumap.parse(text)
    assert maps.parse(text) is first


def test_parse_caches_belong_to_their_owner():
    """Two owners' caches share nothing, and a pod is read through the cache its caller passes."""
    text = "0=node1:0\n1=node2:1\n"
    mine, other = gpumap.ParseCache(), gpumap.ParseCache()
    first = mine.parse(text)
    assert other.parse(text) is not first and len(other) == 1
    meta = {"name": "a-1", "annotations": {"gpu-scheduling-map": text}}
    read = podrequest.read(meta, mine)
    assert isinstance(read, podrequest.MapRequest) and read.entry is first.entries[1]
    assert gpumap.entry_for_pod(meta, mine) is first.entries[1]
    fresh = gpumap.ParseCache()
    podrequest.read(meta, fresh)
    assert len(fresh) == 1 and fresh.get(text) is not None


def test_parse_cache_raises_a_fresh_error_with_every_problem_each_time():
    text = "0=node1:x\nbroken\n"
    errors = []
    maps = gpumap.ParseCache()
    for _ in range(2):
        with pytest.raises(gpumap.MapError) as info:
            maps.parse(text)
        errors.append(info.value)
    assert errors[0] is not errors[1]
    assert [p.line for p in errors[1].problems] == [1, 2]
    assert str(errors[0]) == str(errors[1])


# ---- hostile maps: bounded messages, linear work, length-checked integers, ASCII only ---------------------------


def test_message_does_not_grow_with_the_square_of_the_input():
    # Every line bad, each as long as the whole map allows: the message lists 10 problems and counts the rest.
    line = "x" * 200
    with pytest.raises(gpumap.MapError) as info:
        gpumap.parse("\n".join([line] * 1000))
    message = str(info.value)
    assert len(info.value.problems) == gpumap.MAX_PROBLEMS and info.value.total == 1000
    assert message.endswith("; and 990 more problems") and len(message) < 4000
    assert "line 1 '" + "x" * 60 + "'…: missing `=`" in message


def test_many_bad_ids_on_one_long_line_are_counted_not_listed():
    with pytest.raises(gpumap.MapError) as info:
        gpumap.parse("0=node1:" + ",".join(["x"] * 50_000))
    assert info.value.total == 50_000 and len(str(info.value)) < 4000


def test_message_size_is_independent_of_the_number_of_bad_lines():
    sizes = set()
    for n in (20, 200, 2000):
        with pytest.raises(gpumap.MapError) as info:
            gpumap.parse("\n".join(f"{i}=Bad_{'y' * 80}:0" for i in range(n)))
        sizes.add(len(str(info.value)) - len(str(n - 10)))
    assert len(sizes) == 1, sizes


def test_a_map_longer_than_kubernetes_allows_is_refused_at_once():
    with pytest.raises(gpumap.MapError, match="at most 262144 are allowed"):
        gpumap.parse("0=n:0\n" * 50_000)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("9" * 5000 + "=node1:0", "index '" + "9" * 60 + "'… has 5000 digits; at most 9 are allowed (index < 10^9)"),
        ("1000000000=node1:0", "index '1000000000' has 10 digits; at most 9 are allowed"),
        ("0=node1:" + "1" * 5000, "gpu id '" + "1" * 60 + "'… has 5000 digits; at most 4 are allowed"),
        ("0=node1:10000", "gpu id '10000' has 5 digits; at most 4 are allowed (gpu id < 10^4)"),
    ],
)
def test_integers_are_length_checked_before_conversion(text, fragment):
    with pytest.raises(gpumap.MapError) as info:
        gpumap.parse(text)
    assert fragment in str(info.value)


def test_largest_integers_allowed():
    assert gpumap.parse("999999999=node1:9999,0").entries[999999999].gpu_ids == (9999, 0)


@pytest.mark.parametrize(
    "meta, fragment",
    [
        ({"name": "x-0", "labels": {"apps.kubernetes.io/pod-index": "7" * 5000}}, "has 5000 digits; at most 9"),
        ({"name": "x-" + "7" * 5000}, "has 5000 digits; at most 9"),
        ({"name": "x-1", "labels": {"apps.kubernetes.io/pod-index": 1}}, "is a number; expected a string"),
        ({"name": "x-1", "labels": ["a"]}, "metadata.labels is an array"),
        ({"name": ["x-1"]}, "metadata.name is an array"),
        ([], "metadata is an array"),
        ({"name": "x\n" * 10_000}, "pod name 'x\\nx\\n"),
    ],
)
def test_pod_index_hostile_metadata(meta, fragment):
    with pytest.raises(gpumap.PodIndexError) as info:
        gpumap.pod_index(meta)
    assert fragment in str(info.value) and len(str(info.value)) < 1000 and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "char, name",
    [
        ("\u00a0", "U+00A0 (NO-BREAK SPACE)"),
        ("\u2028", "U+2028 (LINE SEPARATOR)"),
        ("\u2029", "U+2029 (PARAGRAPH SEPARATOR)"),
        ("\u200b", "U+200B (ZERO WIDTH SPACE)"),
        ("\u3000", "U+3000 (IDEOGRAPHIC SPACE)"),
        ("\ufeff", "U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
        ("\u0085", "U+0085 (control character)"),
        ("\x0b", "U+000B (control character)"),
        ("\x0c", "U+000C (control character)"),
        ("\x00", "U+0000 (control character)"),
        ("\x1b", "U+001B (control character)"),
        ("\x7f", "U+007F (control character)"),
        ("\x1c", "U+001C (control character)"),
        ("\ud800", "U+D800 (surrogate)"),
        ("\uff10", "U+FF10 (FULLWIDTH DIGIT ZERO)"),
    ],
)
@pytest.mark.parametrize("where", ["0={c}node1:0", "0 ={c}node1:0", "0=node1:0{c}", "{c}0=node1:0", "0=node1:0,{c}1"])
def test_unicode_whitespace_and_control_characters_are_named_not_taken_as_spaces(char, name, where):
    with pytest.raises(gpumap.MapError) as info:
        gpumap.parse(where.format(c=char))
    message = str(info.value)
    assert f"character {name} is not allowed: the map is ASCII" in message
    assert message.isascii() or message.replace("…", "").isascii()
    assert char not in message


def test_tabs_and_crlf_are_still_whitespace():
    assert gpumap.parse("\t0\t=\tnode1\t:\t0\t,\t1\t\r\n") == gpumap.parse("0=node1:0,1")


def test_missing_index_lists_a_bounded_number_of_indices():
    big = gpumap.parse("".join(f"{i}=n:0\n" for i in range(20_000)))
    with pytest.raises(gpumap.PodIndexError) as info:
        big.entry_for(99_999)
    message = str(info.value)
    assert "(indices in the map: 0, 1, 2" in message and "19, … (20000 indices in all)" in message
    assert len(message) < 300


def test_wrong_type_map():
    with pytest.raises(gpumap.MapError, match="is a number; expected a string"):
        gpumap.entry_for_pod({"name": "a-0", "annotations": {"gpu-scheduling-map": 3}})
    with pytest.raises(gpumap.PodIndexError, match=r"metadata\.annotations is an array"):
        gpumap.entry_for_pod({"name": "a-0", "annotations": []})


def test_parse_cache_is_bounded_in_bytes_and_lru():
    maps = gpumap.ParseCache()
    keep = "0=n:0\n"
    maps.parse(keep)
    for i in range(300):  # 300 distinct maps of about 100 KB: 30 MB of text offered
        text = f"{i}=n:0\n" + "#" * 100_000
        with pytest.raises(gpumap.MapError):
            maps.parse(text)
        maps.parse(keep)  # used again and again: stays
        assert maps.bytes <= gpumap.PARSE_CACHE_BYTES
        assert len(maps) <= gpumap.PARSE_CACHE_ENTRIES
    assert maps.get(keep) is not None
    assert maps.get("0=n:0\n" + "#" * 100_000) is None  # the oldest went first
    big = "".join(f"{i}=n:0\n" for i in range(20_000))  # counted by its entries too
    maps.parse(big)
    assert maps.bytes <= gpumap.PARSE_CACHE_BYTES
    maps.clear()
    assert len(maps) == 0 and maps.bytes == 0
