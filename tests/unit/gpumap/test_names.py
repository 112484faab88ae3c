"""The Kubernetes name rules: one table per rule, the limits at their edges, and every place that refuses a name
using them."""

import pytest

from gpu_scheduling import constants, names
from gpu_scheduling.board import forms
from gpu_scheduling.cli import documents, template

LABEL_63 = "a" * 63
SUBDOMAIN_253 = ".".join(["a" * 63] * 3 + ["a" * 61])


@pytest.mark.parametrize(
    "value, label, subdomain, label_name",
    [
        ("a", True, True, True),
        ("node-1", True, True, True),
        ("0", True, True, True),
        (LABEL_63, True, True, True),
        (LABEL_63 + "a", False, True, False),
        ("a.b", False, True, True),
        (SUBDOMAIN_253, False, True, False),
        (SUBDOMAIN_253 + "a", False, False, False),
        ("Node1", False, False, True),
        ("a_b", False, False, True),
        ("-a", False, False, False),
        ("a-", False, False, False),
        ("a..b", False, False, True),
        (".a", False, False, False),
        ("", False, False, False),
        ("a\n", False, False, False),  # `$` would let a trailing newline through
        ("a b", False, False, False),
        ("a\u00a0", False, False, False),
        ("é", False, False, False),
        (None, False, False, False),
        (1, False, False, False),
        (["a"], False, False, False),
    ],
)
def test_name_rules(value, label, subdomain, label_name):
    assert names.is_label(value) is label
    assert names.is_subdomain(value) is subdomain
    assert names.is_label_name(value) is label_name


def test_limits_below_the_rule():
    assert names.is_label("a" * 52, 52)
    assert not names.is_label("a" * 53, 52)
    assert not names.is_subdomain("a" * 11, 10)


def test_messages_state_the_limit():
    assert "at most 63 characters" in names.label_rule()
    assert "at most 52 characters" in names.label_rule(52)
    assert "at most 253 characters" in names.subdomain_rule()
    assert "at most 63 characters" in names.LABEL_NAME_RULE


@pytest.mark.parametrize("name", ["a\n", "A", "a" * 64, "-a"])
def test_every_place_refuses_a_bad_label(name):
    with pytest.raises(forms.FormError):
        forms.check_namespace(name, forms.Settings(namespaces=(name,)))
    with pytest.raises(ValueError, match="is not a valid name"):
        template.render(name=name)
    claim = {"apiVersion": constants.API_VERSION, "kind": constants.GPU_CLAIM_KIND, "metadata": {"name": "c"}}
    with pytest.raises(documents.DocumentError, match="is not a valid namespace name"):
        documents.check([claim], namespace=name)
