"""The scheduling framework's filter phases, as kube-scheduler's: each rule a plugin (scheduler.plugins, one file
each, in one profile list), judged in two steps.

- PreFilter (`Plugin.pre_filter`): read the pod once per attempt. A plugin answers what its Filter needs of the pod,
  SKIP when the pod asks nothing of it (its Filter is then not run on any node: the common pod costs nothing), or a
  `PodRefusal` when the pod cannot be placed on any node for this rule (a field it cannot read, a claim that does
  not exist).
- Filter (`Plugin.filter`): judge one node. It answers None when the pod fits, or a `Reason`: the verdict, with its
  words written only when asked (a claim pod that fits no GPU node is judged against every one, and only the few
  nodes a message names need theirs). There is no second, verdict-only copy of a rule.

Each plugin also names the cluster changes that can make a pod it refused fit (`Plugin.wakes_on`): what the queue
must route to such a pod.

The Score phase, as kube-scheduler's, ranks the nodes a pod fits where the scheduler has a choice among them (a claim
pod's GPU nodes; a map pod's node is the map's): the plugins of a preferred rule (scheduler.plugins.SCORE_PROFILE,
each with its weight) implement it in three steps.

- PreScore (`Plugin.pre_score`): read the pod once per attempt: what its Score needs, or SKIP when the pod asks
  nothing preferred of the rule (the rule then ranks no node: the common pod costs nothing).
- Score (`Plugin.score`): a raw score of each of the feasible nodes, the nodes that can take the pod now.
- NormalizeScore (`Plugin.normalize`): those scores brought to 0..MAX_NODE_SCORE, the higher the better.
A node's preference is the sum over the plugins of weight times normalized score (`Scoring.scores`).

`Cycle` is one attempt's state (kube-scheduler's CycleState): the plugins that apply to the pod and what each read
of it; `prepare` makes one. `Snapshot` is the narrow handle the filters read the cluster through: the room each
node has left (fit.NodeUsage), who holds which GPU (claims.ledger) and the volume objects
(scheduler.volumes.VolumeCache), never the scheduler; scheduler.cache gives the live one and trial copies. Pure: no
I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol

if TYPE_CHECKING:
    from gpu_scheduling.claims.allocator import Holding
    from gpu_scheduling.claims.ledger import Conflict, Hold
    from gpu_scheduling.scheduler.fit import NodeUsage
    from gpu_scheduling.scheduler.volumes import VolumeCache

Reason = Callable[[], str]
"""A Filter's refusal of a node: called only when its words are wanted."""


class _Skip:
    def __repr__(self) -> str:
        return "SKIP"


SKIP: Final = _Skip()
"""What `pre_filter` answers when the pod asks nothing of the plugin: its Filter is not run."""


@dataclasses.dataclass(frozen=True)
class PodRefusal:
    """The pod cannot be placed on any node for this rule now: `message` says why, naming the field or object."""

    message: str


# The cluster changes a plugin may name in `wakes_on` (kube-scheduler's ClusterEvent resources).
NODE: Final = "Node"
"""A node appeared or changed (labels, taints, allocatable, readiness)."""
POD_GONE: Final = "PodGone"
"""A pod left a node or asks less of it: room was made."""
POD_ADDED: Final = "PodAdded"
"""A pod was bound to a node (or assumed there). A rule that judges the pods of a whole topology domain names it
(InterPodAffinity, PodTopologySpread): a pod waiting for such a rule is woken by a pod added to or gone from any
node, and by any node's change."""
NAMESPACE: Final = "Namespace"
"""A namespace's labels changed: a pod affinity term's namespace selector may match it now, or no more."""
PVC: Final = "PersistentVolumeClaim"
PV: Final = "PersistentVolume"
STORAGE_CLASS: Final = "StorageClass"
CSI_NODE: Final = "CSINode"
# ... and those of the GPU rules (the map's GPUs, the GpuClaim allocator):
GPUS_FREED: Final = "GpusFreed"
"""GPUs of a node were freed (claims.ledger)."""
GPU_CLAIM: Final = "GpuClaim"
"""A GpuClaim appeared or its spec changed."""
GPU_INVENTORY: Final = "GpuNodeStatus"
"""A node's GPU inventory appeared or changed."""

NODE_SCOPED: Final = frozenset({NODE, POD_GONE, POD_ADDED, GPUS_FREED})
"""The kinds of change that concern given nodes: a pod waiting for one node is woken only by a change of that node."""


@dataclasses.dataclass(frozen=True)
class ClusterEvent:
    """A change the informers saw that may make a waiting pod fit (kube-scheduler's ClusterEvent): the informers
    make one such call to the scheduling queue per change, and the queue wakes exactly the pods it can help."""

    kind: str
    nodes: frozenset[str] = frozenset()
    """The nodes it concerns (the NODE_SCOPED kinds)."""
    name: str | None = None
    """The object it concerns, "<namespace>/<name>" (PVC, GPU_CLAIM)."""
    gpus: bool = False
    """NODE, POD_GONE: the node has a GPU inventory, so claim pods, which may go to any such node, may fit now."""


MAX_NODE_SCORE: Final = 100
"""The best normalized score a Score plugin gives a node (kube-scheduler's MaxNodeScore); 0 is the worst."""


class Plugin:
    """One rule. Subclasses set `name` (kube-scheduler's plugin of the same rule) and `wakes_on`, and implement
    `pre_filter` and `filter`; a rule that also ranks nodes (a preferred rule) implements `pre_score`, `score` and
    `normalize`."""

    name: ClassVar[str]
    wakes_on: ClassVar[frozenset[str]]

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        """What `filter` needs of `pod`, SKIP, or a PodRefusal. May raise nothing: what cannot be read is a
        PodRefusal naming the field."""
        raise NotImplementedError

    def filter(self, state: Any, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        """None when the pod (as `state`) fits `node` for this rule; else a Reason."""
        raise NotImplementedError

    def pre_score(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        """What `score` needs of `pod`, or SKIP when the pod asks nothing preferred of this rule. May raise nothing:
        a preferred field that cannot be read (the apiserver never stores one) ranks no node, SKIP."""
        raise NotImplementedError

    def score(self, state: Any, nodes: Sequence[Mapping[str, Any]], snap: Snapshot) -> dict[str, int]:
        """The raw score of each of `nodes` (by name): the feasible nodes, all that can take the pod now, since some
        rules weigh a node against the others (kube-scheduler's PreScore reads the same list)."""
        raise NotImplementedError

    def normalize(self, state: Any, scores: Mapping[str, int]) -> dict[str, int]:
        """`scores` (of `score`) brought to 0..MAX_NODE_SCORE, the higher the better."""
        raise NotImplementedError


class GpuHoldings(Protocol):
    """Who holds which GPU, as the allocator and the filters read it: claims.ledger.Ledger, or a trial's
    claims.ledger.Overlay of it."""

    def hold(self, uid: str) -> Hold | None: ...

    def holdings(self, node: str) -> tuple[Holding, ...]: ...

    def conflicts(self, node: str, gpu_ids: Iterable[int], exclusivity: str, uid: str) -> list[Conflict]: ...


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the filters and the allocator read of the cluster besides the node they judge: the scheduler's cache
    (scheduler.cache), or a trial's copy of it."""

    usage: NodeUsage
    volumes: VolumeCache | None = None
    """None where no volume objects are watched (unit tests of the node rules): a pod with a claim is refused."""
    gpus: GpuHoldings | None = None
    """Who holds which GPU (None where only the node rules are judged)."""
    nodes: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """Every node by name (the rules of topology domains read their labels)."""
    namespaces: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """Every namespace by name (pod affinity terms' namespace selectors read their labels)."""

    def node_labels(self, name: str) -> Mapping[str, str] | None:
        """The labels of node `name`, None when the node is not known."""
        node = self.nodes.get(name)
        return None if node is None else (node["metadata"].get("labels") or {})

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        """The labels of namespace `name` (none when it is not known)."""
        namespace = self.namespaces.get(name)
        return {} if namespace is None else (namespace["metadata"].get("labels") or {})


@dataclasses.dataclass(frozen=True)
class Cycle:
    """One attempt at one pod: the plugins that judge it, in the profile's order, each with what it read."""

    pod: Mapping[str, Any]
    snap: Snapshot
    active: tuple[tuple[Plugin, Any], ...]

    def refusal(self, node: Mapping[str, Any], skip: Collection[str] = ()) -> tuple[Plugin, Reason] | None:
        """The first plugin (not named in `skip`) that refuses `node`, with its reason; None when the pod fits."""
        for plugin, state in self.active:
            if plugin.name in skip:
                continue
            reason = plugin.filter(state, node, self.snap)
            if reason is not None:
                return plugin, reason
        return None

    def fits(self, node: Mapping[str, Any], skip: Collection[str] = ()) -> bool:
        return self.refusal(node, skip) is None

    def problem(self, node: Mapping[str, Any], skip: Collection[str] = ()) -> str | None:
        """Why the pod does not fit `node` (the first rule it breaks, in words), or None."""
        refused = self.refusal(node, skip)
        return None if refused is None else refused[1]()

    def applies(self, name: str) -> bool:
        """Whether the plugin `name` judges this pod (its PreFilter did not skip it)."""
        return any(plugin.name == name for plugin, _ in self.active)

    def state(self, name: str) -> Any:
        """What plugin `name` read of the pod (None when it does not judge it)."""
        return next((state for plugin, state in self.active if plugin.name == name), None)

    def explain(self, refused: Collection[str], nodes: Mapping[str, Mapping[str, Any]], limit: int = 3) -> str:
        """Why the pod fits none of the nodes named `refused`: the reasons of the first `limit`, and how many
        more (the others' words are never written)."""
        shown = sorted(refused)[:limit]
        reasons = [self.problem(nodes[name]) or "" for name in shown]
        more = len(refused) - len(shown)
        return "; ".join(reasons) + (f"; and {more} more" if more > 0 else "")


def prepare(pod: Mapping[str, Any], snap: Snapshot, profile: Sequence[Plugin]) -> Cycle | PodRefusal:
    """Run every plugin's PreFilter on `pod`: the cycle, or the first plugin's refusal of the pod."""
    active: list[tuple[Plugin, Any]] = []
    for plugin in profile:
        state = plugin.pre_filter(pod, snap)
        if isinstance(state, PodRefusal):
            return state
        if state is not SKIP:
            active.append((plugin, state))
    return Cycle(pod, snap, tuple(active))


@dataclasses.dataclass(frozen=True)
class Scoring:
    """One attempt's Score phase: the score plugins that rank nodes for the pod (their PreScore did not skip), each
    with its weight and what it read of the pod."""

    snap: Snapshot
    active: tuple[tuple[Plugin, int, Any], ...]

    def scores(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Each of the feasible `nodes` (by name): the sum over the plugins of weight times normalized score."""
        total = {node["metadata"]["name"]: 0 for node in nodes}
        for plugin, weight, state in self.active:
            for name, score in plugin.normalize(state, plugin.score(state, nodes, self.snap)).items():
                total[name] += weight * score
        return total

    def rank(self, names: Sequence[str]) -> dict[str, int]:
        """`scores` of the nodes named (those the snapshot knows), the allocator's preference; empty when they all
        score alike, so that the choice among them is left to what decides next."""
        nodes = [self.snap.nodes[name] for name in names if name in self.snap.nodes]
        if len(nodes) < 2:
            return {}
        total = self.scores(nodes)
        return total if len(set(total.values())) > 1 else {}


def prepare_scores(
    pod: Mapping[str, Any], snap: Snapshot, profile: Sequence[tuple[Plugin, int]], alike: Collection[str] = ()
) -> Scoring | None:
    """Run every score plugin's PreScore on `pod` (`profile`: each plugin with its weight; those named in `alike`, which
    the caller knows to score every node alike now, are skipped): the attempt's Scoring, or None when each one skips
    (the pod asks nothing preferred: its nodes are not scored at all)."""
    active = []
    for plugin, weight in profile:
        if plugin.name in alike:
            continue
        state = plugin.pre_score(pod, snap)
        if state is not SKIP:
            active.append((plugin, weight, state))
    return Scoring(snap, tuple(active)) if active else None


def default_normalize(scores: Mapping[str, int], reverse: bool = False) -> dict[str, int]:
    """kube-scheduler's DefaultNormalizeScore: each score scaled to 0..MAX_NODE_SCORE by the highest (integer
    division); with `reverse`, MAX_NODE_SCORE minus that, so the fewest wins. All 0: all 0 (reverse: all the best)."""
    highest = max(scores.values(), default=0)
    if highest <= 0:
        return {name: MAX_NODE_SCORE if reverse else score for name, score in scores.items()}
    scaled = {name: MAX_NODE_SCORE * score // highest for name, score in scores.items()}
    return {name: MAX_NODE_SCORE - score for name, score in scaled.items()} if reverse else scaled


def wakes(profile: Iterable[Plugin], names: Iterable[str]) -> frozenset[str]:
    """The cluster changes that can make a pod refused by the plugins `names` fit."""
    wanted = set(names)
    return frozenset(event for plugin in profile if plugin.name in wanted for event in plugin.wakes_on)
