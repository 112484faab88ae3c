"""The GpuClaim and GpuSchedulingPolicy enums are spelled once, in constants (the type and its values): every enum
of the CRDs is one of them, value for value and in the same order, and the programs' own lists are drawn from them."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from gpu_scheduling import constants
from gpu_scheduling.board import forms
from gpu_scheduling.claims import allocator
from gpu_scheduling.cli import template
from harness import manifests

#: (CRD kind, path of the property in its schema) -> the constant its enum must equal.
ENUMS = {
    ("GpuClaim", "spec.devices.policy"): constants.POLICIES,
    ("GpuClaim", "spec.devices.exclusivity"): constants.EXCLUSIVITIES,
    ("GpuClaim", "spec.strategy"): constants.STRATEGIES,
    ("GpuClaim", "spec.topology.mode"): constants.TOPOLOGY_MODES,
    ("GpuClaim", "status.phase"): constants.CLAIM_PHASES,
    ("GpuClaim", "status.strategy"): constants.STRATEGIES,
    ("GpuSchedulingPolicy", "spec.defaultStrategy"): constants.STRATEGIES,
    ("GpuSchedulingPolicy", "spec.queueOrder"): constants.QUEUE_ORDERS,
    ("GpuSchedulingPolicy", "status.strategy"): constants.STRATEGIES,
    ("GpuSchedulingPolicy", "status.queueOrder"): constants.QUEUE_ORDERS,
}


def _enums(schema: dict[str, Any], path: str = "") -> dict[str, list[str]]:
    out = {path.lstrip("."): schema["enum"]} if "enum" in schema else {}
    for name, sub in (schema.get("properties") or {}).items():
        out |= _enums(sub, f"{path}.{name}")
    return out


def _crd_enums() -> dict[tuple[str, str], list[str]]:
    out = {}
    for crd in manifests.crds():
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            for path, values in _enums(version["schema"]["openAPIV3Schema"]).items():
                out[(kind, path)] = values
    return out


def test_every_enum_of_the_crds_is_a_constant():
    found = {key: values for key, values in _crd_enums().items() if key[0] != "GpuNodeStatus"}
    assert set(found) == set(ENUMS)
    for key, values in found.items():
        assert tuple(values) == ENUMS[key], key


@pytest.mark.parametrize(
    ("literal", "values"),
    [
        (constants.Strategy, constants.STRATEGIES),
        (constants.Policy, constants.POLICIES),
        (constants.Exclusivity, constants.EXCLUSIVITIES),
        (constants.TopologyMode, constants.TOPOLOGY_MODES),
        (constants.ClaimPhase, constants.CLAIM_PHASES),
        (constants.QueueOrder, constants.QUEUE_ORDERS),
    ],
)
def test_the_values_are_those_of_the_type(literal, values):
    assert get_args(literal) == values


def test_the_readers_take_the_constants():
    assert allocator.Strategy is constants.Strategy
    assert allocator.Policy is constants.Policy
    assert allocator.Exclusivity is constants.Exclusivity
    assert allocator.TopologyMode is constants.TopologyMode
    assert forms.POLICIES == constants.POLICIES
    assert set(forms.EXCLUSIVITIES) == set(constants.EXCLUSIVITIES) - {"MIG"}
    assert set(forms.TOPOLOGY_MODES) == set(constants.TOPOLOGY_MODES)
    assert set(template.POLICIES) <= set(constants.POLICIES)
