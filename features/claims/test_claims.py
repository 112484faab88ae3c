"""The GpuClaim API (claims.feature, @claims: both tiers): the apiserver validates claims, the webhook wires
CUDA_VISIBLE_DEVICES to the allocation."""

from __future__ import annotations

from pytest_bdd import scenarios, then, when

from features.support import World, get_pod, pod_body, step
from gpu_scheduling import constants
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths

scenarios("claims.feature")


@when(step('the GpuClaim "{name:q}" asking for {count:d} GPUs with policy "{policy:q}" is created'))
def create_claim(world: World, name: str, count: int, policy: str) -> None:
    body = objects.claim_body(name, {"devices": {"count": count, "policy": policy}})
    world.attempt(lambda: world.api.create(paths.gpu_claims(world.namespace), body))


@when(
    step('the GpuClaim "{name:q}" asking for {count:d} GPUs with policy "{policy:q}" and an empty topology is created')
)
def create_claim_empty_topology(world: World, name: str, count: int, policy: str) -> None:
    body = objects.claim_body(name, {"devices": {"count": count, "policy": policy}, "topology": {}})
    world.attempt(lambda: world.api.create(paths.gpu_claims(world.namespace), body))


@then(step('the GpuClaim "{name:q}" exists with exclusivity "{exclusivity:q}" and topology mode "{mode:q}"'))
def claim_defaults(world: World, name: str, exclusivity: str, mode: str) -> None:
    assert world.error is None, world.error
    claim = world.api.get(paths.gpu_claim(world.namespace, name))
    # Defaults come from the CRD's schema, applied by the apiserver: both must be there, not supplied here.
    assert claim["spec"]["devices"].get("exclusivity") == exclusivity, claim["spec"]
    assert claim["spec"].get("topology", {}).get("mode") == mode, claim["spec"]


@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" is created with the map "{gpu_map:q}"'))
def create_claim_and_map_pod(world: World, name: str, claim: str, gpu_map: str) -> None:
    body = pod_body(name, gpu_map=gpu_map, claim=claim)
    world.attempt(lambda: world.api.create(paths.pods(world.namespace), body))


@then(step('every container of "{name:q}" reads CUDA_VISIBLE_DEVICES from the annotation "{annotation:q}"'))
def cuda_from_annotation(world: World, name: str, annotation: str) -> None:
    spec = get_pod(world, name)["spec"]
    refs = [
        [
            e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            for e in c.get("env") or []
            if e["name"] == constants.CUDA_ENV
        ]
        for c in (spec.get("initContainers") or []) + spec["containers"]
    ]
    assert refs and all(r == [f"metadata.annotations['{annotation}']"] for r in refs), refs
