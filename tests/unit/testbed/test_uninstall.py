"""hack/footprint.py, the one answer to "what of this machine is the test-bed's" that `make uninstall` removes and
`make uninstall-check` requires to be gone: which containers, volumes, networks and images are the test-bed's (and
which are not: a user's kind cluster, a user's image that shares a base layer), which daemon.json settings are its
own, and what the check after an uninstall calls a leftover. The names it reads are the roles' own."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

import pytest
import yaml

from hack import footprint
from tests import ROOT

NAMES = footprint.Names(
    clusters=("gpu-cluster", "gpu-online"),
    registry_container="gpu-testbed-registry",
    registry_volume="gpu-testbed-registry",
    kind_network="kind",
    image_repositories=(
        "gpu-testbed/registry",
        "gpu-scheduling-app",
        "localhost:5001/gpu-scheduler",
        "localhost:5001/kindest/node",
        "localhost:5001/library/python",
        *footprint.COMPONENT_REPOSITORIES,
    ),
    source_label="io.gpu-scheduling.testbed.from",
    cache=pathlib.Path("/cache"),
    paths=(pathlib.Path("/cache/state"), pathlib.Path("/cache/tls")),
    daemon_json=pathlib.Path("/etc/docker/daemon.json"),
    mirror_url="http://localhost:5001",
    capfilter_runtime="runc-capfilter",
    capfilter_path=pathlib.Path("/usr/local/sbin/runc-capfilter"),
    launcher_path=pathlib.Path("/usr/local/sbin/dockerd-background"),
    engine_log=pathlib.Path("/var/log/dockerd.log"),
    record_dir=pathlib.Path("/var/lib/gpu-scheduling-testbed"),
)

DEBIAN = footprint.Image("sha256:debian", ("gpu-testbed/debian:bookworm",), ("L-debootstrap",))
NODE = footprint.Image("sha256:node", ("gpu-testbed/kind-node:v1.34.4-abc",), ("L-rootfs", "L-base", "L-node"))
APP = footprint.Image("sha256:app", ("gpu-scheduling-app:111",), ("L-python", "L-wheels", "L-venv"))
USER_SLIM = footprint.Image("sha256:slim", ("debian:bookworm-slim",), ("L-python",))


def docker(
    *images: footprint.Image, containers=(), volumes=(), networks=("bridge", "host", "none")
) -> footprint.Docker:
    return footprint.Docker(
        "running", tuple(containers), tuple(images), tuple(volumes), tuple(networks), {i.id: "" for i in images}
    )


def ids(images) -> set[str]:
    return {i.id for i in images}


# ---- images -----------------------------------------------------------------------------------------------------


def test_every_tag_of_the_test_beds_repositories_and_namespace_is_its_own():
    images = [
        DEBIAN,
        NODE,
        APP,
        footprint.Image("sha256:old-app", ("gpu-scheduling-app:000",), ("L-python", "L-wheels0")),
        footprint.Image("sha256:prog", ("localhost:5001/gpu-scheduler:abc",), ("L-python", "L-prog")),
        footprint.Image("sha256:apiserver", ("registry.k8s.io/kube-apiserver:v1.34.4",), ("L-debootstrap", "L-bin")),
        footprint.Image("sha256:pause", ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10.1"), ("L-pause",)),
        footprint.Image("sha256:helper", ("gpu-testbed/local-path-helper:bookworm",), ("L-debootstrap",)),
    ]
    assert ids(footprint.testbed_images(images, NAMES)) == ids(images)


def test_images_that_are_not_the_test_beds_stay():
    images = [
        USER_SLIM,
        footprint.Image("sha256:py", ("python:3.11-slim-bookworm",), ("L-python",)),
        footprint.Image("sha256:kindest", ("kindest/node:v1.34.4",), ("L-real-kind",)),
        footprint.Image("sha256:other-registry", ("localhost:5001/something-else:1",), ("L-x",)),
        footprint.Image("sha256:k8s-other", ("registry.k8s.io/kube-state-metrics:v2",), ("L-y",)),
        footprint.Image("sha256:similar", ("gpu-testbed-fork/app:1",), ("L-z",)),
    ]
    assert footprint.testbed_images(images, NAMES) == []


def test_another_tag_of_a_test_bed_image_goes_with_it():
    """python:3.11-slim-bookworm pulled through the public mirror is gpu-testbed/python:bookworm: one image."""
    stand_in = footprint.Image(
        "sha256:python",
        (
            "gpu-testbed/python:bookworm",
            "localhost:5001/library/python:3.11-slim-bookworm",
            "python:3.11-slim-bookworm",
        ),
        ("L-debootstrap-python",),
    )
    (found,) = footprint.testbed_images([stand_in], NAMES)
    assert found.tags == stand_in.tags
    assert footprint.as_json(footprint.footprint(docker(stand_in), NAMES), docker(stand_in), NAMES)["image_refs"] == [
        *stand_in.tags
    ]


def test_the_public_mirrors_stand_in_is_known_by_its_label_under_any_name():
    pulled = footprint.Image(
        "sha256:stand-in",
        ("kindest/node:v1.34.4",),
        ("L-rootfs", "L-base", "L-node", "L-etcd-tag"),
        {"io.gpu-scheduling.testbed.from": "gpu-testbed/kind-node:v1.34.4-abc"},
    )
    assert footprint.testbed_images([pulled], NAMES) == [pulled]


def test_a_dangling_build_on_a_test_bed_image_is_its_own_and_one_sharing_only_a_base_layer_is_not():
    interrupted = footprint.Image("sha256:interrupted", (), ("L-python", "L-wheels", "L-venv", "L-half"))
    superseded_node = footprint.Image("sha256:old-node", (), ("L-rootfs", "L-base", "L-node", "L-old"))
    users_build = footprint.Image("sha256:users", (), ("L-python", "L-their-layer"))  # on debian:bookworm-slim
    users_tagged = footprint.Image("sha256:users-tagged", ("mine:1",), ("L-python", "L-wheels", "L-venv", "L-mine"))
    found = footprint.testbed_images(
        [APP, NODE, USER_SLIM, interrupted, superseded_node, users_build, users_tagged], NAMES
    )
    assert ids(found) == {"sha256:app", "sha256:node", "sha256:interrupted", "sha256:old-node"}
    refs = footprint.as_json(footprint.footprint(docker(*found), NAMES), docker(*found), NAMES)["image_refs"]
    assert "sha256:interrupted" in refs and "gpu-scheduling-app:111" in refs, "dangling by id, tagged by tag"


@pytest.mark.parametrize(
    ("ref", "repository"),
    [
        ("localhost:5001/gpu-board:abc", "localhost:5001/gpu-board"),
        ("localhost:5001/gpu-board", "localhost:5001/gpu-board"),
        ("gpu-testbed/kind-node:v1.34.4-abc", "gpu-testbed/kind-node"),
        ("registry.k8s.io/coredns/coredns:v1.12.1", "registry.k8s.io/coredns/coredns"),
        ("gpu-scheduling-app", "gpu-scheduling-app"),
    ],
)
def test_the_repository_of_a_reference_keeps_a_registrys_port(ref, repository):
    assert footprint._repository(ref) == repository


# ---- containers, volumes, networks -------------------------------------------------------------------------------


def node(name: str, cluster: str, image: str = "sha256:node") -> footprint.Container:
    return footprint.Container(
        f"id-{name}", name, image, {footprint.CLUSTER_LABEL: cluster}, (f"anon-{name}",), ("kind",)
    )


REGISTRY = footprint.Container(
    "id-reg", "gpu-testbed-registry", "sha256:registry", {}, ("gpu-testbed-registry",), ("bridge", "kind")
)


def test_the_clusters_nodes_the_registry_and_a_container_of_a_test_bed_image_are_its_own():
    leftover_build = footprint.Container("id-build", "eager_turing", "sha256:node")  # build.sh's `sleep infinity`
    users = footprint.Container("id-web", "web", "sha256:nginx", {}, ("webdata",), ("bridge",))
    d = docker(
        NODE,
        containers=[
            node("gpu-cluster-control-plane", "gpu-cluster"),
            node("gpu-online-worker", "gpu-online"),
            REGISTRY,
            leftover_build,
            users,
        ],
        volumes=["gpu-testbed-registry", "anon-gpu-cluster-control-plane", "webdata"],
        networks=["bridge", "host", "none", "kind"],
    )
    found = footprint.footprint(d, NAMES)
    assert [c.name for c in found.containers] == [
        "gpu-cluster-control-plane",
        "gpu-online-worker",
        "gpu-testbed-registry",
        "eager_turing",
    ]
    assert found.volumes == ("gpu-testbed-registry",), "anonymous volumes go with their containers (rm --volumes)"
    assert found.networks == ("kind",)


def test_a_users_kind_cluster_stays_and_keeps_kinds_network():
    users_cluster = node("dev-control-plane", "dev", image="sha256:real-kindest")
    d = docker(NODE, containers=[node("gpu-cluster-worker", "gpu-cluster"), users_cluster], networks=["bridge", "kind"])
    found = footprint.footprint(d, NAMES)
    assert [c.name for c in found.containers] == ["gpu-cluster-worker"]
    assert found.networks == (), "the user's cluster is still on it"


def test_an_engine_that_does_not_answer_shows_nothing():
    assert not footprint.footprint(footprint.Docker("stopped"), NAMES)
    assert not footprint.footprint(footprint.Docker("missing"), NAMES)


# ---- daemon.json --------------------------------------------------------------------------------------------------


def test_the_test_beds_settings_in_daemon_json_are_named():
    config = {
        "default-runtime": "runc-capfilter",
        "runtimes": {"runc-capfilter": {"path": "/usr/local/sbin/runc-capfilter"}},
        "registry-mirrors": ["http://localhost:5001", "https://mirror.example.com"],
        "log-driver": "json-file",
    }
    assert footprint.daemon_settings(config, NAMES) == [
        "runtime runc-capfilter",
        "default-runtime runc-capfilter",
        "registry mirror http://localhost:5001",
    ]
    assert (
        footprint.daemon_settings({"registry-mirrors": ["https://mirror.example.com"], "log-level": "info"}, NAMES)
        == []
    )


# ---- the check after an uninstall ---------------------------------------------------------------------------------

CLEAN = footprint.Observed(
    docker=footprint.Docker("stopped"),
    engine_answered=False,
    paths=(),
    engine_files=(),
    daemon_json=None,
    installed=(),
    cache_entries=footprint.CACHE_KEPT,
    cache_exists=True,
)
BEFORE = footprint.Snapshot(
    record={"packages": ["docker.io", "containerd", "runc", "tini"], "daemon_json_before": "absent"},
    daemon_json_before=None,
    engine_configured=True,
    image_ids=("sha256:node", "sha256:node-parent"),
    volumes=("anon-gpu-cluster-worker", "gpu-testbed-registry"),
    cache_entries=footprint.CACHE_KEPT,
)


def test_a_clean_machine_has_no_leftovers():
    assert footprint.leftovers(CLEAN, NAMES) == []
    assert footprint.leftovers(CLEAN, NAMES, BEFORE) == []
    purged = dataclasses.replace(CLEAN, cache_entries=(), cache_exists=False)
    assert footprint.leftovers(purged, NAMES, BEFORE, caches_purged=True) == []


def test_each_leftover_is_named():
    d = footprint.Docker(
        "running",
        containers=(REGISTRY,),
        images=(NODE,),
        volumes=("gpu-testbed-registry", "anon-gpu-cluster-worker"),
        networks=("bridge", "kind"),
        parents={"sha256:node": "sha256:node-parent", "sha256:node-parent": ""},
    )
    after = dataclasses.replace(
        CLEAN,
        docker=d,
        engine_answered=True,
        paths=(pathlib.Path("/cache/state"),),
        engine_files=(NAMES.launcher_path,),
        daemon_json='{"default-runtime": "runc-capfilter", "registry-mirrors": ["http://localhost:5001"]}',
        installed=("docker.io",),
        cache_entries=("bin",),
    )
    assert footprint.leftovers(after, NAMES, BEFORE) == [
        "container gpu-testbed-registry (id-reg)",
        "volume gpu-testbed-registry",
        "network kind (only the test-bed's containers were on it)",
        "image gpu-testbed/kind-node:v1.34.4-abc",
        "image sha256:node-parent: the test-bed's before the uninstall",
        "volume anon-gpu-cluster-worker: a test-bed container's before the uninstall",
        "path /cache/state",
        "engine file /usr/local/sbin/dockerd-background",
        "/etc/docker/daemon.json setting default-runtime runc-capfilter",
        "/etc/docker/daemon.json setting registry mirror http://localhost:5001",
        "/etc/docker/daemon.json exists, and there was none before the test-bed wrote its own",
        "the Docker engine the test-bed set up and started still runs",
        "package docker.io (the test-bed installed it)",
        "MISSING cache /cache/builds: the uninstall must keep it",
        "MISSING cache /cache/node-image: the uninstall must keep it",
    ]


def test_the_users_daemon_json_must_be_back_exactly():
    users = '{\n  "log-level": "info"\n}\n'
    before = dataclasses.replace(
        BEFORE, record={"daemon_json_before": "saved", "packages": []}, daemon_json_before=users
    )
    assert footprint.leftovers(dataclasses.replace(CLEAN, daemon_json=users), NAMES, before) == []
    assert footprint.leftovers(dataclasses.replace(CLEAN, daemon_json=None), NAMES, before) == [
        "/etc/docker/daemon.json is not the one found before the test-bed (kept in its record)"
    ]
    assert footprint.leftovers(dataclasses.replace(CLEAN, daemon_json="{}"), NAMES, before) == [
        "/etc/docker/daemon.json is not the one found before the test-bed (kept in its record)"
    ]


def test_an_engine_the_test_bed_did_not_set_up_keeps_running_and_its_daemon_json():
    """Only the registry mirror was the test-bed's there (roles/public_mirror)."""
    before = dataclasses.replace(BEFORE, record=None, engine_configured=False)
    after = dataclasses.replace(CLEAN, engine_answered=True, daemon_json='{"log-level": "warn"}')
    assert footprint.leftovers(after, NAMES, before) == []
    mirrored = dataclasses.replace(after, daemon_json='{"registry-mirrors": ["http://localhost:5001"]}')
    assert footprint.leftovers(mirrored, NAMES, before) == [
        "/etc/docker/daemon.json setting registry mirror http://localhost:5001"
    ]


def test_a_purged_cache_that_is_still_there_is_a_leftover():
    assert footprint.leftovers(CLEAN, NAMES, BEFORE, caches_purged=True) == ["cache /cache (asked to remove it too)"]


def test_a_snapshot_reads_back_as_it_was_written(tmp_path):
    (tmp_path / "snapshot.json").write_text(json.dumps(dataclasses.asdict(BEFORE)))
    assert footprint.load_snapshot(tmp_path) == BEFORE


# ---- the names, from the roles and the inventory -------------------------------------------------------------------


def test_kubectls_discovery_cache_folder_of_a_server():
    cache = pathlib.Path("/root/.kube/cache")
    assert footprint.discovery_dir("https://127.0.0.1:34183", cache) == cache / "discovery" / "127.0.0.1_34183"
    assert footprint.kubeconfig_servers(
        "clusters:\n- cluster: {server: 'https://127.0.0.1:34183'}\n  name: kind-gpu-cluster\n"
    ) == ["https://127.0.0.1:34183"]


def test_the_discovery_command_names_the_cache_of_a_kubeconfigs_servers_for_teardown(tmp_path, monkeypatch, capsys):
    # make teardown removes the cluster's kubeconfig, after which no later uninstall can name this cache: it asks
    # here first and removes it with the cluster.
    monkeypatch.setenv("KUBECACHEDIR", str(tmp_path / "kube"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("clusters:\n- cluster: {server: 'https://127.0.0.1:41391'}\n")
    assert footprint.main(["discovery", str(kubeconfig)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(tmp_path / "kube" / "discovery" / "127.0.0.1_41391")]
    assert footprint.main(["discovery", str(tmp_path / "gone")]) == 0  # a cluster torn down already: nothing
    assert capsys.readouterr().out == ""


def test_the_names_come_from_the_inventory_the_roles_and_the_clusters_the_test_bed_made(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KUBECACHEDIR", str(tmp_path / "kube"))
    for cluster in ("gpu-cluster", "older-name"):
        (tmp_path / "cache" / "state" / cluster).mkdir(parents=True)
    (tmp_path / "cache" / "state" / "older-name" / "kubeconfig").write_text(
        "clusters:\n- cluster: {server: 'https://127.0.0.1:41391'}\n"
    )
    names = footprint.read_names()
    inventory = yaml.safe_load((ROOT / "inventory" / "localhost" / "group_vars" / "all.yml").read_text())
    online = yaml.safe_load((ROOT / "hack" / "online-vars.yml").read_text())
    assert names.clusters == (inventory["testbed_cluster_name"], online["testbed_cluster_name"], "older-name")
    registry = inventory["testbed_registry"]
    assert {f"{registry}/gpu-scheduler", f"{registry}/kindest/node", f"{registry}/library/python"} <= set(
        names.image_repositories
    )
    assert {"gpu-testbed/registry", "gpu-scheduling-app"} <= set(names.image_repositories)
    assert names.mirror_url == f"http://{registry}"
    assert names.paths == (
        tmp_path / "cache" / "state",
        tmp_path / "cache" / "tls",
        ROOT / "build" / "images",
        ROOT / "build" / "charts",
        tmp_path / "kube" / "discovery" / "127.0.0.1_41391",
    )
    assert footprint.read_names(cluster="other", caches=True).paths[-1] == tmp_path / "cache"
    assert footprint.read_names(cluster="other").clusters[0] == "other"


def test_the_component_images_are_those_the_node_image_script_builds():
    script = (ROOT / "images" / "kind-node" / "build.sh").read_text()
    built = {f"registry.k8s.io/{name}" for name in re.findall(r"\$reg/([a-z][\w/-]*[a-z0-9])", script)}
    built |= {f"registry.k8s.io/{c}" for line in re.findall(r"for c in ([^;]+);", script) for c in line.split()}
    assert built == set(footprint.COMPONENT_REPOSITORIES)


def test_the_images_the_test_bed_names_itself_are_in_its_namespace():
    script = (ROOT / "images" / "kind-node" / "build.sh").read_text()
    own = set(re.findall(r"(?:docker\.io/)?(gpu-testbed/[a-z-]+)", script))
    defaults = {
        role: yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
        for role in ("local_registry", "testbed_facts")
    }
    own |= {
        defaults["local_registry"]["local_registry_image_name"],
        footprint._repository(defaults["testbed_facts"]["testbed_facts_node_image_offline"]),
        footprint._repository(defaults["testbed_facts"]["testbed_facts_python_image_offline"]),
    }
    assert own and all(name.startswith(footprint.IMAGE_NAMESPACE) for name in own), own
