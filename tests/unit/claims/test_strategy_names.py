"""The names `kubectl gpu strategy NAME` accepts."""

import pytest

from gpu_scheduling import constants
from gpu_scheduling.claims import strategy_names as strategies


@pytest.mark.parametrize(
    "name, field, value",
    [
        ("BestFit", "defaultStrategy", "BestFit"),
        ("best-fit", "defaultStrategy", "BestFit"),
        ("best_fit", "defaultStrategy", "BestFit"),
        ("BEST_FIT", "defaultStrategy", "BestFit"),
        ("bestfit", "defaultStrategy", "BestFit"),
        ("LeastUtilized", "defaultStrategy", "LeastUtilized"),
        ("least-utilized", "defaultStrategy", "LeastUtilized"),
        ("least_utilized", "defaultStrategy", "LeastUtilized"),
        ("Least-Utilized", "defaultStrategy", "LeastUtilized"),
        ("RoundRobin", "defaultStrategy", "RoundRobin"),
        ("round-robin", "defaultStrategy", "RoundRobin"),
        ("round_robin", "defaultStrategy", "RoundRobin"),
        ("priority", "queueOrder", "Priority"),
        ("Priority", "queueOrder", "Priority"),
        ("fifo", "queueOrder", "FIFO"),
        ("FIFO", "queueOrder", "FIFO"),
    ],
)
def test_accepted_spellings(name, field, value):
    assert strategies.parse(name) == strategies.Choice(field, value)


@pytest.mark.parametrize("name", ["", "best", "bestfitt", "best fit", "best--fit", "-best-fit", "best_fit_", "lifo"])
def test_unknown_names_list_the_accepted_ones(name):
    with pytest.raises(ValueError) as info:
        strategies.parse(name)
    message = str(info.value)
    assert f"unknown strategy {name!r}" in message
    for accepted in ("BestFit (best-fit, best_fit)", "least_utilized", "round-robin", "priority", "fifo"):
        assert accepted in message


def test_every_crd_name_is_accepted_as_itself():
    for name in constants.STRATEGIES:
        assert strategies.parse(name).value == name
    for name in constants.QUEUE_ORDERS:
        assert strategies.parse(name).value == name


def test_a_claim_takes_node_strategies_only():
    assert strategies.node_strategy("round_robin") == "RoundRobin"
    with pytest.raises(ValueError, match="is a queue order, not a node strategy"):
        strategies.node_strategy("priority")
    assert strategies.Choice("queueOrder", "FIFO").what == "queue order"
    assert strategies.Choice("defaultStrategy", "BestFit").what == "strategy"
