"""The node side's pure decisions (gpu_scheduling.devices) and the webhook's resource request: table tests, and a
hypothesis state machine of kubelet admissions (many pods bound at once, admitted in any order, one container at a
time, kubelets and plugins restarting) in which no container is ever given another pod's GPU."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpu_scheduling import admission, constants, devices, gpumap, patches
from gpu_scheduling.podrequest import PodRequestError

R = constants.GPU_RESOURCE


def pod(
    name: str,
    gpus: tuple[int, ...] | None,
    containers: int = 1,
    init: bool = False,
    units: int | None = None,
    node: str = "node1",
) -> dict[str, Any]:
    n = len(gpus) if gpus else 1 if units is None else units
    limits = {"resources": {"limits": {R: str(units if units is not None else n)}}}
    annotations = {constants.MAP_ANNOTATION: f"0={node}:{','.join(map(str, gpus))}"} if gpus else {}
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": f"c{i}", **limits} for i in range(containers)]}
    if init:
        spec["initContainers"] = [{"name": "init", **limits}]
    meta = {
        "namespace": "ns",
        "name": name,
        "uid": f"u-{name}",
        "labels": {constants.POD_INDEX_LABEL: "0"},
        "annotations": annotations,
    }
    return {"metadata": meta, "spec": spec}


def test_the_plugin_reads_a_pods_map_through_the_cache_it_owns() -> None:
    maps = gpumap.ParseCache()
    first, second = pod("a-0", (2, 3)), pod("b-0", (2, 3))
    assert devices.wanted(first, R, maps) == devices.wanted(first, R)
    assert devices.wanted(second, R, maps) is not None and devices.wanted(second, R, maps).gpus == (2, 3)
    assert len(maps) == 1  # one map text, parsed once for both pods


def test_device_ids_round_trip_and_refuse_others() -> None:
    assert devices.parse_device_id(devices.device_id(7, 3)) == (7, 3)
    for bad in ("gpu", "gpu-1-0", "gpu01-0", "gpu1-00", "GPU1-0", "gpu1-0 ", "gpu99999-0", "nvidia0"):
        assert devices.parse_device_id(bad) is None, bad


def test_advertised_slots_carry_their_gpus_health() -> None:
    out = devices.advertised([{"id": 1, "health": "Unhealthy"}, {"id": 0, "health": "Healthy"}], 2)
    assert out == [("gpu0-0", "Healthy"), ("gpu0-1", "Healthy"), ("gpu1-0", "Unhealthy"), ("gpu1-1", "Unhealthy")]


def test_wanted_reads_the_map_and_the_containers_in_allocation_order() -> None:
    w = devices.wanted(pod("a", (2, 3), containers=2, init=True))
    assert w is not None
    assert (w.gpus, w.containers) == ((2, 3), (("init", 2), ("c0", 2), ("c1", 2)))
    assert devices.wanted({"metadata": {}, "spec": {"containers": [{"name": "x"}]}}) is None
    assert devices.wanted(pod("b", (1,), node="node1") | {"spec": {"nodeName": "node2", **pod("b", (1,))["spec"]}})


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    )
)
def test_wanted_never_raises_on_any_shape(junk: Any) -> None:
    for obj in ({"spec": junk}, {"metadata": junk, "spec": {"containers": [junk]}}, {"spec": {"containers": junk}}):
        devices.wanted(obj)


def test_admitting_refuses_a_pod_given_no_gpu_and_a_wrong_count() -> None:
    stray = devices.wanted(pod("s", None))
    assert stray is not None
    with pytest.raises(devices.Refusal, match="gave it no GPU") as err:
        devices.admitting([stray], {("ns", "s"): {"c0": []}}, 1)
    assert err.value.final
    two = devices.wanted(pod("t", (1,), units=2))
    assert two is not None
    with pytest.raises(devices.Refusal, match="exactly its pod's GPU count"):
        devices.admitting([two], {("ns", "t"): {"c0": []}}, 2)


def test_admitting_waits_for_a_pod_the_watch_has_not_delivered() -> None:
    with pytest.raises(devices.Refusal, match="no pod being admitted") as err:
        devices.admitting([], {("ns", "new"): {"c0": []}}, 1)
    assert not err.value.final


def test_preferred_takes_one_free_slot_of_each_gpu_must_include_first() -> None:
    available = ["gpu1-0", "gpu1-1", "gpu2-1", "gpu3-0"]
    assert devices.preferred((1, 2), available, [], 2) == ["gpu1-0", "gpu2-1"]
    assert devices.preferred((1, 2), available, ["gpu1-1"], 2) == ["gpu1-1", "gpu2-1"]
    assert devices.preferred((4,), available, [], 1) == []  # no free slot: Allocate will say why


def test_check_refuses_another_gpu_and_names_the_full_one() -> None:
    match = devices.Match(devices.Wanted("ns", "p", "u", (5,), (("c0", 1),)), "c0", 1)
    assert devices.check(match, ["gpu5-3"]) == (5,)
    with pytest.raises(devices.Refusal, match="GPU 5 has no free slot"):
        devices.check(match, ["gpu4-0"])
    with pytest.raises(devices.Refusal, match="does not advertise"):
        devices.check(match, ["nvidia0"])


def test_response_simulated_files_and_nvml_device_nodes() -> None:
    gpus = [devices.NodeGpu(3, "GPU-a", 3), devices.NodeGpu(1, "GPU-b", 1)]
    sim = devices.response(gpus, files_dir="/var/lib/x/")
    assert sim.envs == {constants.DEVICE_GPUS_ENV: "3,1", constants.NVIDIA_DEVICES_ENV: "GPU-a,GPU-b"}
    assert sim.mounts == (
        (f"{constants.DEVICE_FILES_DIR}/gpu3", "/var/lib/x/gpu3", True),
        (f"{constants.DEVICE_FILES_DIR}/gpu1", "/var/lib/x/gpu1", True),
    )
    assert sim.devices == ()
    real = devices.response(gpus, files_dir=None, control_devices=["/dev/nvidiactl"])
    assert real.mounts == ()
    assert [d[0] for d in real.devices] == ["/dev/nvidia3", "/dev/nvidia1", "/dev/nvidiactl"]


def _review(obj: dict[str, Any], resource: str | None) -> dict[str, Any]:
    request = {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": obj}
    return dict(admission.review_pod(request, resource)["response"])  # type: ignore[arg-type]


def test_webhook_asks_for_one_unit_per_gpu_in_every_container() -> None:
    obj = pod("w-0", (0, 1, 2), containers=2, init=True)
    for c in [*obj["spec"]["containers"], *obj["spec"]["initContainers"]]:
        del c["resources"]
    obj["spec"]["containers"][1]["resources"] = {"limits": {"cpu": "1"}}
    response = _review(obj, R)
    out = patches.apply(obj, json.loads(base64.b64decode(response["patch"])))
    for c in [*out["spec"]["containers"], *out["spec"]["initContainers"]]:
        assert c["resources"]["limits"][R] == c["resources"]["requests"][R] == "3", c["name"]
    assert out["spec"]["containers"][1]["resources"]["limits"]["cpu"] == "1"
    # Without --gpu-resource nothing but the variable is set.
    untouched = patches.apply(obj, json.loads(base64.b64decode(_review(obj, None)["patch"])))
    assert "resources" not in untouched["spec"]["containers"][0]


def test_webhook_refuses_another_amount_naming_the_container() -> None:
    obj = pod("w-0", (0, 1), units=1)
    response = _review(obj, R)
    assert not response["allowed"]
    assert "container c0 asks for gpu.scheduling/gpu: 1" in response["status"]["message"]
    assert "gives the pod 2 GPU(s)" in response["status"]["message"]
    same = _review(pod("w-0", (0, 1)), R)
    assert same["allowed"]


def test_resource_patch_refuses_resources_of_the_wrong_shape() -> None:
    obj = pod("w-0", (0,))
    obj["spec"]["containers"][0]["resources"] = {"limits": ["x"]}
    with pytest.raises(PodRequestError, match=r"resources\.limits is not an object"):
        patches.resource_patch(obj, R, 1)


class Admissions(RuleBasedStateMachine):
    """The kubelet of one node with GPUs 0..5 and 3 slots each. Pods are bound (several may wait at once), and the
    kubelet admits any waiting pod next, one container at a time, asking the plugin through PodResources as the real
    one lists it; kubelet restarts keep what was recorded (its checkpoint). Invariant: every container ever given
    devices got exactly one slot of each GPU of its own pod, or its pod was refused as a whole."""

    SLOTS = 3
    GPUS = 6

    def __init__(self) -> None:
        super().__init__()
        self.bound: dict[str, dict[str, Any]] = {}
        self.recorded: dict[str, dict[str, list[str]]] = {}  # admitted pods: container -> devices
        self.refused: set[str] = set()
        self.gpus: dict[str, tuple[int, ...]] = {}
        self.n = 0

    @rule(
        gpus=st.lists(st.integers(0, 5), min_size=0, max_size=3, unique=True),
        containers=st.integers(1, 3),
        init=st.booleans(),
    )
    def bind(self, gpus: list[int], containers: int, init: bool) -> None:
        self.n += 1
        self.bound[f"p{self.n}"] = pod(f"p{self.n}", tuple(gpus) or None, containers, init)
        self.gpus[f"p{self.n}"] = tuple(gpus)

    def _held(self) -> set[str]:
        return {d for c in self.recorded.values() for ids in c.values() for d in ids}

    @precondition(lambda self: bool(self.bound))
    @rule(data=st.data())
    def admit_any(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.bound)))
        obj = self.bound.pop(name)
        wanted = [w for w in (devices.wanted(p) for p in [obj, *self.bound.values()]) if w is not None]
        view: dict[tuple[str, str], dict[str, list[str]]] = {("ns", p): dict(c) for p, c in self.recorded.items()}
        mine = {c["name"]: [] for c in obj["spec"]["containers"]}
        view[("ns", name)] = mine  # listed from the start of its admission, nothing recorded yet
        available = [devices.device_id(g, s) for g in range(self.GPUS) for s in range(self.SLOTS)]
        try:
            for c in [*obj["spec"].get("initContainers", []), *obj["spec"]["containers"]]:
                size = devices.requested(c)
                match = devices.admitting(wanted, view, size)
                assert (match.pod.namespace, match.pod.name) == ("ns", name)
                free = [
                    d for d in available if d not in self._held() and d not in {i for v in mine.values() for i in v}
                ]
                picked = devices.preferred(match.pod.gpus, free, [], size)
                picked += [d for d in free if d not in picked][: size - len(picked)]
                assert devices.check(match, picked) == match.pod.gpus
                if c["name"] in mine:
                    mine[c["name"]] = picked
        except devices.Refusal:
            self.refused.add(name)
            return
        self.recorded[name] = mine

    @rule()
    def kubelet_restarts(self) -> None:
        pass  # recorded devices come back from the checkpoint; the plugin holds no state of its own to lose

    @precondition(lambda self: bool(self.recorded))
    @rule(data=st.data())
    def pod_ends(self, data: st.DataObject) -> None:
        del self.recorded[data.draw(st.sampled_from(sorted(self.recorded)))]

    @invariant()
    def every_container_holds_its_pods_gpus(self) -> None:
        for name, containers in self.recorded.items():
            for container, ids in containers.items():
                assert sorted(devices.gpu_of(d) or 0 for d in ids) == sorted(self.gpus[name]), (name, container, ids)

    @invariant()
    def no_slot_is_given_twice(self) -> None:
        held = [d for c in self.recorded.values() for ids in c.values() for d in ids]
        assert len(held) == len(set(held))


Admissions.TestCase.settings = settings(max_examples=150, stateful_step_count=30)
TestAdmissions = Admissions.TestCase


def test_the_kubelet_view_turned_around_per_gpu_and_its_cross_check() -> None:
    view = {"ns/a": {"c0": ["gpu3-0"], "c1": ["gpu3-1", "gpu4-0"]}, "ns/b": {"c0": ["gpu3-2"], "c1": []}, "ns/c": {}}
    assert devices.kubelet_pods_by_gpu(view) == {3: ["ns/a", "ns/b"], 4: ["ns/a"]}
    assert devices.kubelet_disagreements(["ns/a", "ns/b"], ["ns/a"]) == ["ns/b"]
    assert devices.kubelet_disagreements(["ns/a"], ["ns/a", "ns/waiting"]) == []  # bound, not yet admitted


def test_kubectl_gpu_health_fails_a_gpu_the_kubelet_gave_to_another_pod() -> None:
    from gpu_scheduling.cli import health

    status = {
        "devices": [
            {"id": 3, "health": "Healthy", "inUseBy": ["ns/a"], "kubeletPods": ["ns/a", "ns/x"]},
            {"id": 4, "health": "Healthy", "inUseBy": ["ns/b"], "kubeletPods": ["ns/b"]},
            {"id": 5, "health": "Healthy", "inUseBy": ["ns/c"]},
        ]
    }
    inv = {"metadata": {"name": "node1"}, "spec": {"nodeName": "node1"}, "status": status}

    def map_pod(name: str, gpu: int) -> dict:
        # The holders the kubelet's assignment is compared with: pods a, b and c hold GPUs 3, 4 and 5 by their map.
        meta = {"name": name, "namespace": "ns", "uid": name, "labels": {constants.POD_INDEX_LABEL: "0"}}
        meta["annotations"] = {constants.MAP_ANNOTATION: f"0=node1:{gpu}"}
        return {"metadata": meta, "spec": {"nodeName": "node1"}, "status": {"phase": "Running"}}

    pods = [map_pod("a", 3), map_pod("b", 4), map_pod("c", 5)]
    checks = health.occupancy_checks([inv], [], pods)
    failing = [c for c in checks if c.status == health.FAIL]
    assert len(failing) == 1 and "GPU 3 to ns/x" in failing[0].detail, checks
    assert failing[0].name == "inventory/node1"
    assert not [c for c in health.inventories([inv], [{"metadata": {"name": "node1"}}]) if c.status == health.FAIL]
    status["devices"][0]["kubeletPods"] = ["ns/a"]
    assert not [c for c in health.occupancy_checks([inv], [], pods) if c.status == health.FAIL]


def test_the_agent_publishes_the_kubelets_view_only_when_fresh(tmp_path: Any) -> None:
    import os

    from gpu_scheduling.agent import inventory, main

    file = tmp_path / "view.json"
    assert main.read_kubelet_view(str(file)) is None  # none yet
    file.write_text(json.dumps({"resource": R, "pods": {"ns/a": {"c0": ["gpu1-0"]}}}))
    view = main.read_kubelet_view(str(file))
    assert view == {1: ["ns/a"]}
    status = inventory.node_status(inventory.parse_simulated("count=2"), (), (), view)
    assert [d["kubeletPods"] for d in status["devices"]] == [[], ["ns/a"]]
    assert "kubeletPods" not in inventory.node_status(inventory.parse_simulated("count=2"), ())["devices"][0]
    os.utime(file, (0, 0))  # a plugin that stopped writing: its view is not published
    assert main.read_kubelet_view(str(file)) is None
    file.write_text("{not json")
    assert main.read_kubelet_view(str(file)) is None


def test_a_claim_pods_request_must_be_its_claims_count() -> None:
    obj = pod("c", None, containers=2, units=2)
    assert devices.count_mismatch(obj, 2) is None
    assert devices.count_mismatch(pod("none", None, units=0), 3) is None  # asks for nothing: nothing to check
    message = devices.count_mismatch(obj, 3)
    assert message is not None and "container c0 asks for 2 gpu.scheduling/gpu but its GpuClaim gives 3" in message


def test_webhook_warns_a_claim_pod_that_asks_for_no_gpu_device() -> None:
    obj = pod("c", None, units=0)
    del obj["spec"]["containers"][0]["resources"]
    obj["metadata"]["annotations"] = {constants.CLAIM_ANNOTATION: "train"}
    response = _review(obj, R)
    assert response["allowed"] and "names GpuClaim train but asks for no gpu.scheduling/gpu" in response["warnings"][0]
    assert "warnings" not in _review(obj, None)
    obj["spec"]["containers"][0]["resources"] = {"limits": {R: "2"}}
    assert "warnings" not in _review(obj, R)


def test_isolated_gpus_are_numbered_from_zero_in_cuda_visible_devices() -> None:
    """Where the plugin isolates GPUs (NVML), a map pod of node4's GPU 3 sees one GPU, CUDA's 0; a claim pod asking
    for 2 sees 0,1. Without isolation the node's ids stay (the take-home's meaning). The scheduler accepts both."""
    from gpu_scheduling import podrequest

    def cuda(response: dict[str, Any], obj: dict[str, Any]) -> set[str]:
        out = patches.apply(obj, json.loads(base64.b64decode(response["patch"])))
        return {e["value"] for c in out["spec"]["containers"] for e in c["env"] if e["name"] == constants.CUDA_ENV}

    obj = pod("m-0", (3,))
    assert cuda(_review(obj, R), obj) == {"3"}
    request = {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": obj}
    isolated = dict(admission.review_pod(request, R, isolated=True)["response"])  # type: ignore[arg-type]
    assert cuda(isolated, obj) == {"0"}
    patched = patches.apply(obj, json.loads(base64.b64decode(isolated["patch"])))
    entry = devices.objects.gpumap.entry_for_pod(patched["metadata"])
    assert entry is not None and podrequest.missing_cuda(patched, entry, isolated=True) is None
    assert "not 3 as its map entry" in (podrequest.missing_cuda(patched, entry) or "")
    claim = pod("c", None, units=2)
    claim["metadata"]["annotations"] = {constants.CLAIM_ANNOTATION: "train"}
    request["object"] = claim
    assert cuda(dict(admission.review_pod(request, R, isolated=True)["response"]), claim) == {"0,1"}  # type: ignore[arg-type]
