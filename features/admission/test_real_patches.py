"""The webhook's JSON patches as a real kube-apiserver applies them, beside the project's own applier
(`gpu_scheduling.patches.apply`, which the unit tests and the CLI's dry run use): control-plane tier.

Each pod of the table is created with `dryRun=All` in the scenario's namespace: the apiserver calls the running
gpu-webhook, applies the patch it answers and returns the pod it would store. The same pod goes through
`admission.review_pod`, the webhook's decision, and its patch through `patches.apply`. The containers' env must
come out the same. The shapes cover every operation the patch builders write: the env list added, an entry
appended, one replaced in place (a value, a valueFrom), duplicates removed from the back, init containers. The
extended-resource patch (`--gpu-resource`, off in the harness's webhook) is applied by the apiserver as a JSON
patch of a PodTemplate, whose `template.spec` is a pod's spec: keys with a `/` take JSON Pointer escapes there.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from features.support import World, pod_body
from gpu_scheduling import admission, constants, patches
from gpu_scheduling.kube import paths

CUDA = constants.CUDA_ENV
FROM_IDS = {"fieldRef": {"fieldPath": f"metadata.annotations['{constants.GPU_IDS_ANNOTATION}']"}}


def _no_env(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0].pop("env")


def _duplicates(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][1]["env"] = [
        {"name": CUDA, "value": "7"},
        {"name": "KEEP", "value": "1"},
        {"name": CUDA, "value": "6"},
        {"name": CUDA, "valueFrom": FROM_IDS},
    ]
    pod["spec"]["initContainers"][0]["env"].insert(0, {"name": CUDA, "valueFrom": FROM_IDS})


def _empty_env(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["env"] = []
    pod["spec"]["containers"][1]["env"].append({"name": CUDA, "value": "5"})


SHAPES: dict[str, Callable[[dict[str, Any]], None]] = {
    "env appended": lambda pod: None,
    "env added": _no_env,
    "replaced and duplicates removed": _duplicates,
    "empty env and a value replaced": _empty_env,
}
KINDS = {"map": {"gpu_map": "0=node1:2,3"}, "claim": {"gpu_map": None, "claim": "any"}}


def _webhook_patch(pod: dict[str, Any], namespace: str) -> list[patches.PatchOp]:
    """The patch the webhook's decision answers for the CREATE of `pod`."""
    request = {
        "uid": "table",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": namespace,
        "object": pod,
    }
    response = admission.review_pod(request)["response"]  # type: ignore[arg-type]
    assert response["allowed"], response
    ops: list[patches.PatchOp] = json.loads(base64.b64decode(response["patch"]))
    return ops


def _containers(spec: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """(name, env, resources) of every init container and container. The apiserver's own defaults are left out:
    fieldRef's apiVersion, an empty env list dropped, no resources written as {}."""
    out = []
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        env = copy.deepcopy(c.get("env") or [])
        for entry in env:
            (entry.get("valueFrom") or {}).get("fieldRef", {}).pop("apiVersion", None)
        out.append((c["name"], env, c.get("resources") or {}))
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_apiserver_applies_the_webhooks_patch_as_the_projects_applier_does(
    world: World, kind: str, shape: str
) -> None:
    # A JSON copy: pod_body's containers share one env list, which would change all three at once here.
    pod = json.loads(json.dumps(pod_body(f"table-{shape.replace(' ', '-')}-0", **KINDS[kind])))  # type: ignore[arg-type]
    SHAPES[shape](pod)
    ops = _webhook_patch(pod, world.namespace)
    assert ops, "the webhook changes nothing: the table would prove nothing"
    ours = patches.apply(pod, ops)
    theirs = world.api.request("POST", paths.pods(world.namespace), pod, params={"dryRun": "All"})
    assert _containers(theirs["spec"]) == _containers(ours["spec"])
    # and the patch did something on every container (the variable is there once, as the webhook meant)
    for name, env, _ in _containers(theirs["spec"]):
        assert [e["name"] for e in env].count(CUDA) == 1, (name, env)


@pytest.mark.parametrize(
    "resources",
    [
        None,
        {},
        {"limits": {"cpu": "1"}},
        {"limits": {"nvidia.com/gpu": "2"}, "requests": {"memory": "1Mi"}},
    ],
    ids=["none", "empty", "other limits", "the limit already right"],
)
def test_the_apiserver_applies_the_resource_patch_as_the_projects_applier_does(
    world: World, resources: dict[str, Any] | None
) -> None:
    pod = json.loads(json.dumps(pod_body("table-0", gpu_map="0=node1:2,3")))
    for c in pod["spec"]["containers"]:
        if resources is not None:
            c["resources"] = copy.deepcopy(resources)
    ops = patches.resource_patch(pod, "nvidia.com/gpu", 2)
    assert ops
    ours = patches.apply(pod, ops)
    template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "table"},
        "template": {"metadata": {"labels": {"app": "table"}}, "spec": pod["spec"]},
    }
    path = f"/api/v1/namespaces/{world.namespace}/podtemplates"
    world.api.create(path, template)
    moved = [dict(op, path=f"/template{op['path']}") for op in ops]
    theirs = world.api.request(
        "PATCH", f"{path}/table", moved, params={"dryRun": "All"}, content_type="application/json-patch+json"
    )
    assert _containers(theirs["template"]["spec"]) == _containers(ours["spec"])
