"""The CUDA_VISIBLE_DEVICES JSONPatch: added once, replaced in place, order of other entries kept."""

from gpu_scheduling import patches


def env_of(pod, kind="containers", i=0):
    return pod["spec"][kind][i].get("env")


def test_adds_env_to_containers_without_env():
    pod = {"spec": {"containers": [{"name": "a"}, {"name": "b", "env": []}]}}
    out = patches.apply(pod, patches.cuda_patch(pod, "0,1"))
    assert env_of(out) == [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]
    assert env_of(out, i=1) == [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]


def test_replaces_existing_value_in_place_and_keeps_order():
    env = [{"name": "A", "value": "1"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "9"}, {"name": "B", "value": "2"}]
    pod = {"spec": {"containers": [{"name": "a", "env": env}]}}
    out = patches.apply(pod, patches.cuda_patch(pod, "3"))
    assert env_of(out) == [
        {"name": "A", "value": "1"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": "3"},
        {"name": "B", "value": "2"},
    ]


def test_duplicates_collapse_to_one():
    env = [
        {"name": "CUDA_VISIBLE_DEVICES", "value": "1"},
        {"name": "X", "value": "x"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": "2"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": "3"},
    ]
    pod = {"spec": {"containers": [{"name": "a", "env": env}]}}
    out = patches.apply(pod, patches.cuda_patch(pod, "0"))
    assert env_of(out) == [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}, {"name": "X", "value": "x"}]


def test_value_from_is_replaced_by_a_value():
    env = [{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    pod = {"spec": {"containers": [{"name": "a", "env": env}]}}
    out = patches.apply(pod, patches.cuda_patch(pod, "1"))
    assert env_of(out) == [{"name": "CUDA_VISIBLE_DEVICES", "value": "1"}]


def test_init_containers_are_patched_too():
    pod = {
        "spec": {
            "initContainers": [{"name": "init", "env": [{"name": "A", "value": "a"}]}],
            "containers": [{"name": "main"}],
        }
    }
    ops = patches.cuda_patch(pod, "2")
    out = patches.apply(pod, ops)
    assert env_of(out, "initContainers") == [
        {"name": "A", "value": "a"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": "2"},
    ]
    assert env_of(out) == [{"name": "CUDA_VISIBLE_DEVICES", "value": "2"}]
    assert {op["path"].split("/")[2] for op in ops} == {"initContainers", "containers"}


def test_patch_is_idempotent():
    pod = {"spec": {"containers": [{"name": "a", "env": [{"name": "A", "value": "a"}]}]}}
    once = patches.apply(pod, patches.cuda_patch(pod, "0,1"))
    twice = patches.apply(once, patches.cuda_patch(once, "0,1"))
    assert once == twice
