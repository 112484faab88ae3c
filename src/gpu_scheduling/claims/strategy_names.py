"""The strategy names every program accepts (`kubectl gpu strategy NAME`, `--strategy` of gpu-scheduler and
gpu-board): the CRD's (BestFit, LeastUtilized, RoundRobin), kebab-case (best-fit, ...) and the reference's
snake_case (best_fit, ...), in any case; the reference's `priority` and `fifo` choose the queue order instead. Pure."""

from __future__ import annotations

import argparse
import dataclasses
import re

from gpu_scheduling import constants

#: Fields of the GpuSchedulingPolicy's spec a name sets.
STRATEGY_FIELD = "defaultStrategy"
QUEUE_FIELD = "queueOrder"


@dataclasses.dataclass(frozen=True)
class Choice:
    """What a name sets: `spec.<field> = value`."""

    field: str
    value: str

    @property
    def what(self) -> str:
        return "strategy" if self.field == STRATEGY_FIELD else "queue order"


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _key(name: str) -> str:
    return re.sub(r"[-_\s]", "", name).lower()


_CHOICES: dict[str, Choice] = {_key(s): Choice(STRATEGY_FIELD, s) for s in constants.STRATEGIES} | {
    _key(q): Choice(QUEUE_FIELD, q) for q in constants.QUEUE_ORDERS
}


def accepted() -> str:
    """The accepted names, one group per choice, for help and error messages."""
    names = [f"{s} ({_kebab(s)}, {_kebab(s).replace('-', '_')})" for s in constants.STRATEGIES]
    names += [f"{q.lower()} (queue order {q})" for q in constants.QUEUE_ORDERS]
    return ", ".join(names)


def parse(name: str) -> Choice:
    """The choice `name` stands for; ValueError naming the accepted names otherwise."""
    choice = _CHOICES.get(_key(name))
    # Only the separators the three spellings use: "Best Fit" or "best--fit" are not names.
    if choice is None or not re.fullmatch(r"[A-Za-z]+(?:[-_][A-Za-z]+)*", name):
        raise ValueError(f"unknown strategy {name!r}; accepted: {accepted()}")
    return choice


def node_strategy(name: str) -> str:
    """A claim's `spec.strategy` from any spelling of a node strategy (not `priority`/`fifo`, which are queue
    orders of the whole scheduler)."""
    choice = parse(name)
    if choice.field != STRATEGY_FIELD:
        raise ValueError(f"{name!r} is a queue order, not a node strategy; a claim takes one of {constants.STRATEGIES}")
    return choice.value


def flag(text: str) -> str:
    """`node_strategy` as an argparse type: a program's `--strategy` (gpu-scheduler, gpu-board)."""
    try:
        return node_strategy(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
