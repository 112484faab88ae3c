"""The informers' Compactor (kube.informer): an object comes out equal to what went in, with its keys and short
values shared among the objects of one informer, and its table of values never grows past its bound."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gpu_scheduling.kube.informer import Compactor

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_a_compacted_object_equals_the_original(obj):
    assert Compactor()(obj) == obj


def test_two_watch_events_share_their_keys_and_short_values_but_not_long_ones():
    text = json.dumps({"metadata": {"namespace": "bench", "note": "x" * 100}})
    compact = Compactor()
    a, b = compact(json.loads(text)), compact(json.loads(text))
    (key_a,), (key_b,) = a.keys(), b.keys()
    assert key_a is key_b
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["metadata"]["note"] is not b["metadata"]["note"], "long values are not kept in the table"


def test_the_table_is_emptied_when_it_reaches_its_bound():
    compact = Compactor()
    for i in range(Compactor.TABLE_SIZE + 10):
        compact(f"uid-{i}")
    assert len(compact._values) <= Compactor.TABLE_SIZE
