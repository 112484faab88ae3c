"""The scheduler's rules, one plugin per file (scheduler.framework says what a plugin is), and PROFILE: the one
list that says which run and in what order, kube-scheduler's filter order: the node's own state first (Ready,
cordon, taints), then what the pod reads of the node (node affinity, host ports, resources), then its volumes, then
the pods of its topology domains (spread, pod affinity). A
new rule is a new file here and one line in PROFILE.

SCORE_PROFILE is the one list of the rules that rank nodes (their preferred side, in the same files), each with
kube-scheduler's default weight."""

from __future__ import annotations

from gpu_scheduling.scheduler.framework import Cycle, Plugin
from gpu_scheduling.scheduler.plugins.inter_pod_affinity import InterPodAffinity
from gpu_scheduling.scheduler.plugins.node_affinity import NodeAffinity
from gpu_scheduling.scheduler.plugins.node_ports import NodePorts
from gpu_scheduling.scheduler.plugins.node_ready import NodeReady
from gpu_scheduling.scheduler.plugins.node_resources import NodeResourcesFit
from gpu_scheduling.scheduler.plugins.node_unschedulable import NodeUnschedulable
from gpu_scheduling.scheduler.plugins.node_volume_limits import NodeVolumeLimits
from gpu_scheduling.scheduler.plugins.pod_topology_spread import PodTopologySpread
from gpu_scheduling.scheduler.plugins.taint_toleration import TaintToleration
from gpu_scheduling.scheduler.plugins.unsupported import Unsupported
from gpu_scheduling.scheduler.plugins.volume_binding import VolumeBinding
from gpu_scheduling.scheduler.plugins.volume_restrictions import VolumeRestrictions
from gpu_scheduling.scheduler.plugins.volume_zone import VolumeZone

NODE_STATE: tuple[Plugin, ...] = (NodeReady(), NodeUnschedulable(), TaintToleration())
"""The node's own state: judged alike for every pod with the same tolerations (the claim path caches it so)."""

PROFILE: tuple[Plugin, ...] = (
    *NODE_STATE,
    Unsupported(),
    NodeAffinity(),
    NodePorts(),
    NodeResourcesFit(),
    VolumeRestrictions(),
    NodeVolumeLimits(),
    VolumeBinding(),
    VolumeZone(),
    PodTopologySpread(),
    InterPodAffinity(),
)

NODE_STATE_NAMES = frozenset(p.name for p in NODE_STATE)

SCORE_PROFILE: tuple[tuple[Plugin, int], ...] = (
    (TaintToleration(), 3),
    (NodeAffinity(), 2),
    (PodTopologySpread(), 2),
    (InterPodAffinity(), 2),
)
"""The Score plugins and their weights, kube-scheduler v1.34's default profile's for these rules: PreferNoSchedule
taints (3), preferred node affinity (2), ScheduleAnyway topology spread (2), preferred pod affinity and anti-affinity
(2). A node's preference is the sum of weight times its 0..100 score from each (framework.Scoring). Its other default
scores are not here: the GPU strategy stands for NodeResourcesFit's and NodeResourcesBalancedAllocation's (weight 1
each), and ImageLocality's (1) is not scored."""


def asks_only_a_place(cycle: Cycle) -> bool:
    """The pod asks nothing of a node beyond its own state but a place among its pods (no selector, port, request
    or volume): the claim path then judges a node by whether its pod count is reached, and nothing else."""
    return all(
        plugin.name in NODE_STATE_NAMES or (plugin.name == NodeResourcesFit.name and not state)
        for plugin, state in cycle.active
    )
