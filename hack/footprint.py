#!/usr/bin/env python3
"""What the KinD test-bed left on this machine: the one answer that `make uninstall` removes and that
`make uninstall-check` requires to be empty afterwards.

The footprint is read from the machine and classified by plain functions of what was read (`Docker`, `Names`), so
that the rules are unit-tested (tests/unit/testbed/test_uninstall.py) and the uninstall and its check cannot disagree on
what belongs to the test-bed:

  containers  the node containers of every kind cluster the test-bed made (label io.x-k8s.kind.cluster: the
              inventory's testbed_cluster_name, the online path's (hack/online-vars.yml) and each cluster with a
              folder under <cache>/state), the local registry's container (roles/local_registry), and any container
              running one of the test-bed's images (a node image or stand-in build that was interrupted);
  volumes     the local registry's named volume; a container's anonymous volumes go with it (docker rm --volumes);
  networks    kind's network `kind`, once every container on it is one of the above (kind creates it with the
              first cluster and never removes it);
  images      every repository under gpu-testbed/ (the node image, its base and root filesystem images, the
              registry image, the storage provisioner and helper, the bootstrapped Python), the component images
              images/kind-node/build.sh builds under their upstream registry.k8s.io names, the shared Python
              environment (app_images_app_name), the program images and the public mirror's stand-ins under
              testbed_registry; with each, every other tag of the same image (python:3.11-slim-bookworm pulled
              through the mirror is gpu-testbed/python:bookworm), the stand-in node image however it is named
              (its label public_mirror_source_label), and the dangling images built on any of them (interrupted
              or superseded builds);
  paths       <cache>/state (each cluster's kubeconfig, kind configuration and acceptance results), <cache>/tls
              (the webhook's CA and keys), the build outputs in the clone (build/images, build/charts) and
              kubectl's discovery cache of the clusters' API servers (~/.kube/cache/discovery/<host>_<port>);
              with --caches, the cache folder itself.

The Docker engine's configuration (daemon.json, the runc wrapper, the background launcher and its log, the
Debian packages) is roles/docker_engine's, which records what it changed; uninstall.yml restores it from that
record, and `check` verifies the result against a snapshot of the record taken before.

Usage (with the project's virtual environment, which has PyYAML and Jinja2):
    hack/footprint.py list [--caches] [--cluster NAME] [--registry HOST:PORT]
        the footprint as JSON; reads only, and looks into Docker only when an engine answers
    hack/footprint.py snapshot DIR
        before an uninstall: the footprint, the engine record and the cache's folders, into DIR/snapshot.json
    hack/footprint.py check [--snapshot DIR] [--caches-purged] [--packages-kept]
        after an uninstall: names every leftover and exits 1 if there is one. Where no engine answers (the
        uninstall stops the one the test-bed started) it looks into Docker's storage with a dockerd of its own on
        a private socket, stopped again before it exits.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jinja2
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import toolchain

ROOT = toolchain.ROOT
INVENTORY = toolchain.INVENTORY
ONLINE_VARS = ROOT / "hack" / "online-vars.yml"

# The label kind puts on each node container, naming its cluster (kind's pkg/cluster/constants).
CLUSTER_LABEL = "io.x-k8s.kind.cluster"
# Every image the test-bed names itself lives under this namespace (roles' defaults and images/kind-node/build.sh;
# tests/unit/testbed/test_uninstall.py checks both).
IMAGE_NAMESPACE = "gpu-testbed/"
# The images images/kind-node/build.sh builds under their upstream names, to import them into the node image
# (tests/unit/testbed/test_uninstall.py checks this list against the script). Any tag: an earlier pin's build is the
# test-bed's too.
COMPONENT_REPOSITORIES = tuple(
    f"registry.k8s.io/{name}"
    for name in (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
        "etcd",
        "coredns/coredns",
        "pause",
        "testbed-netd",
    )
)
# The folders of the cache that the uninstall keeps (the builds, hours on a cold machine) unless told otherwise.
CACHE_KEPT = ("bin", "builds", "node-image")


# ---- names: what the test-bed calls the things it adds ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Names:
    """Every name the test-bed gives what it adds, as the inventory and the roles' defaults define them."""

    clusters: tuple[str, ...]  # kind clusters the test-bed made
    registry_container: str  # local_registry_container
    registry_volume: str  # local_registry_volume
    kind_network: str  # local_registry_network: kind's network
    image_repositories: tuple[str, ...]  # repositories whose every tag is the test-bed's
    source_label: str  # public_mirror_source_label: the stand-in node image's
    cache: pathlib.Path  # hack/toolchain.py cache-dir
    paths: tuple[pathlib.Path, ...]  # files and folders the uninstall removes, outside Docker
    # The engine's configuration (roles/docker_engine, roles/public_mirror).
    daemon_json: pathlib.Path
    mirror_url: str  # public_mirror_url
    capfilter_runtime: str
    capfilter_path: pathlib.Path
    launcher_path: pathlib.Path
    engine_log: pathlib.Path
    record_dir: pathlib.Path


def _yaml(path: pathlib.Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def _defaults(role: str, name: str = "defaults") -> dict[str, Any]:
    return _yaml(ROOT / "roles" / role / name / "main.yml")


def _render(value: str, context: Mapping[str, Any]) -> str:
    """A role default written as a Jinja template, with the few facts it may name (an unknown one is an error)."""
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(value).render(context)


def _repository(ref: str) -> str:
    """The repository of an image reference: `localhost:5001/gpu-board:abc` -> `localhost:5001/gpu-board`."""
    name, sep, tag = ref.rpartition(":")
    return name if sep and "/" not in tag else ref


def discovery_dir(server: str, cache: pathlib.Path) -> pathlib.Path:
    """kubectl's discovery cache folder of an API server (k8s.io/cli-runtime's computeDiscoverCacheDir: the host
    without its scheme, every character but letters, digits, '_', '/', '.', '(' and ')' made '_')."""
    host = server.replace("https://", "", 1).replace("http://", "", 1)
    return cache / "discovery" / re.sub(r"[^(\w/.)]", "_", host)


def kube_cache_dir() -> pathlib.Path:
    """kubectl's cache folder ($KUBECACHEDIR, else ~/.kube/cache)."""
    return pathlib.Path(os.environ.get("KUBECACHEDIR") or pathlib.Path.home() / ".kube" / "cache")


def discovery_dirs(kubeconfig: pathlib.Path) -> list[pathlib.Path]:
    """kubectl's discovery cache folders of the API servers a kubeconfig names (none when it is gone)."""
    if not kubeconfig.is_file():
        return []
    return [discovery_dir(server, kube_cache_dir()) for server in kubeconfig_servers(kubeconfig.read_text())]


def kubeconfig_servers(text: str) -> list[str]:
    """The API servers a kubeconfig names."""
    config = yaml.safe_load(text) or {}
    return [c["cluster"]["server"] for c in config.get("clusters") or [] if (c.get("cluster") or {}).get("server")]


def read_names(cluster: str | None = None, registry: str | None = None, caches: bool = False) -> Names:
    """The names, from the inventory (cluster and registry may be given instead, as an Ansible run's -e does), the
    online path's variables, the roles' defaults and the cluster folders under <cache>/state."""
    inventory = _yaml(INVENTORY)
    cluster = cluster or inventory["testbed_cluster_name"]
    registry = registry or inventory["testbed_registry"]
    cache = toolchain.cache_root()
    facts = _defaults("testbed_facts")
    local_registry = _defaults("local_registry")
    app_images = _defaults("app_images")
    public_mirror = _defaults("public_mirror")
    engine = _defaults("docker_engine")
    context = {"testbed_facts_repo": str(ROOT), "testbed_facts_cache_dir": str(cache), "testbed_registry": registry}

    state = cache / "state"
    made = sorted(p.name for p in state.iterdir() if p.is_dir()) if state.is_dir() else []
    clusters = tuple(dict.fromkeys([cluster, _yaml(ONLINE_VARS)["testbed_cluster_name"], *made]))

    repositories = [
        local_registry["local_registry_image_name"],
        _repository(facts["testbed_facts_node_image_offline"]),
        _repository(facts["testbed_facts_python_image_offline"]),
        app_images["app_images_app_name"],
        *(f"{registry}/{program['image']}" for program in app_images["app_images_programs"].values()),
        # The public mirror's stand-ins, as roles/public_mirror pushes them.
        f"{registry}/{_repository(facts['testbed_facts_node_image_online'])}",
        f"{registry}/library/{_repository(facts['testbed_facts_python_image_online'])}",
        *COMPONENT_REPOSITORIES,
    ]

    tls_dir = _defaults("webhook_tls")["webhook_tls_dir"]
    tls = [pathlib.Path(_render(tls_dir, {**context, "testbed_cluster_name": c})) for c in clusters]
    paths = [
        state,
        cache / "tls",
        *(p for p in tls if not p.is_relative_to(cache / "tls")),  # a webhook_tls_dir set outside the cache
        pathlib.Path(_render(app_images["app_images_build_dir"], context)),
        pathlib.Path(_render(_defaults("deploy")["deploy_package_dir"], context)),
        *(d for name in made for d in discovery_dirs(state / name / "kubeconfig")),
        *([cache] if caches else []),
    ]
    return Names(
        clusters=clusters,
        registry_container=local_registry["local_registry_container"],
        registry_volume=local_registry["local_registry_volume"],
        kind_network=local_registry["local_registry_network"],
        image_repositories=tuple(dict.fromkeys(repositories)),
        source_label=public_mirror["public_mirror_source_label"],
        cache=cache,
        paths=tuple(dict.fromkeys(paths)),
        daemon_json=pathlib.Path(public_mirror["public_mirror_daemon_json"]),
        mirror_url=_render(public_mirror["public_mirror_url"], context),
        capfilter_runtime=engine["docker_engine_capfilter_runtime"],
        capfilter_path=pathlib.Path(engine["docker_engine_capfilter_path"]),
        launcher_path=pathlib.Path(engine["docker_engine_launcher_path"]),
        engine_log=pathlib.Path(engine["docker_engine_log"]),
        record_dir=pathlib.Path(engine["docker_engine_record_dir"]),
    )


# ---- what Docker holds, and which of it is the test-bed's (pure) ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class Image:
    id: str
    tags: tuple[str, ...]  # repository:tag, empty for a dangling image
    layers: tuple[str, ...]  # RootFS diff ids, bottom first
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def label(self) -> str:
        return ", ".join(self.tags) or f"{self.id[:19]} (dangling)"


@dataclasses.dataclass(frozen=True)
class Container:
    id: str
    name: str
    image: str  # the image's id
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    volumes: tuple[str, ...] = ()  # volumes mounted (named or anonymous)
    networks: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Docker:
    """What the engine holds. `engine`: running (it answered), stopped (installed, no answer) or missing."""

    engine: str
    containers: tuple[Container, ...] = ()
    images: tuple[Image, ...] = ()  # top-level images: tagged and dangling (not a build's hidden intermediates)
    volumes: tuple[str, ...] = ()
    networks: tuple[str, ...] = ()
    # Every image id, a build's hidden intermediates included, with its parent ("" when none).
    parents: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Footprint:
    containers: tuple[Container, ...]
    volumes: tuple[str, ...]
    networks: tuple[str, ...]
    images: tuple[Image, ...]

    def __bool__(self) -> bool:
        return bool(self.containers or self.volumes or self.networks or self.images)


def testbed_images(images: Iterable[Image], names: Names) -> list[Image]:
    """The test-bed's images: those with a tag in one of its repositories, or the stand-in's label, and the
    dangling images whose layers extend one of those (built on it; an interrupted or superseded build)."""
    images = list(images)
    repositories = set(names.image_repositories)
    named = [
        image
        for image in images
        if names.source_label in image.labels
        or any(_repository(tag) in repositories or tag.startswith(IMAGE_NAMESPACE) for tag in image.tags)
    ]
    bases = [image.layers for image in named if image.layers]
    built_on = [
        image
        for image in images
        if not image.tags and image not in named and any(image.layers[: len(base)] == base for base in bases)
    ]
    return named + built_on


def footprint(docker: Docker, names: Names) -> Footprint:
    """What of Docker's content is the test-bed's (nothing when the engine does not answer)."""
    images = testbed_images(docker.images, names)
    image_ids = {image.id for image in images}
    containers = [
        c
        for c in docker.containers
        if c.labels.get(CLUSTER_LABEL) in names.clusters or c.name == names.registry_container or c.image in image_ids
    ]
    ours = {c.id for c in containers}
    network = names.kind_network
    on_network = [c for c in docker.containers if network in c.networks]
    networks = [network] if network in docker.networks and all(c.id in ours for c in on_network) else []
    volumes = [names.registry_volume] if names.registry_volume in docker.volumes else []
    return Footprint(tuple(containers), tuple(volumes), tuple(networks), tuple(images))


def daemon_settings(config: Mapping[str, Any], names: Names) -> list[str]:
    """The test-bed's settings in a daemon.json: the runc wrapper (runtime, default runtime) and the mirror."""
    found = []
    if names.capfilter_runtime in (config.get("runtimes") or {}):
        found.append(f"runtime {names.capfilter_runtime}")
    if config.get("default-runtime") == names.capfilter_runtime:
        found.append(f"default-runtime {names.capfilter_runtime}")
    if names.mirror_url in (config.get("registry-mirrors") or []):
        found.append(f"registry mirror {names.mirror_url}")
    return found


# ---- the check after an uninstall (pure) ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The machine before the uninstall (`snapshot`): what the check compares the result with."""

    record: Mapping[str, Any] | None  # roles/docker_engine's record, None when there was none
    daemon_json_before: str | None  # the daemon.json the record kept (daemon.json.before), None when none
    engine_configured: bool  # the test-bed had set up the engine (record, launcher or wrapper present)
    image_ids: tuple[str, ...]  # the test-bed's images and their build parents
    volumes: tuple[str, ...]  # volumes of the test-bed's containers and the registry's volume
    cache_entries: tuple[str, ...]  # the kept folders of the cache that existed


@dataclasses.dataclass(frozen=True)
class Observed:
    """The machine after the uninstall."""

    docker: Docker
    engine_answered: bool  # an engine answered before the check started one of its own
    paths: tuple[pathlib.Path, ...]  # those of Names.paths that exist
    engine_files: tuple[pathlib.Path, ...]  # the wrapper, launcher, engine log, record folder: those that exist
    daemon_json: str | None  # its text, None when absent
    installed: tuple[str, ...]  # the recorded packages that are still installed
    cache_entries: tuple[str, ...]  # the kept folders of the cache that exist
    cache_exists: bool


def leftovers(after: Observed, names: Names, before: Snapshot | None = None, caches_purged: bool = False) -> list[str]:
    """Every trace of the test-bed after an uninstall, each named with what it is; empty when it is all gone."""
    out: list[str] = []
    left = footprint(after.docker, names)
    out += [f"container {c.name} ({c.id[:12]})" for c in left.containers]
    out += [f"volume {v}" for v in left.volumes]
    out += [f"network {n} (only the test-bed's containers were on it)" for n in left.networks]
    out += [f"image {image.label()}" for image in left.images]
    if before is not None:
        listed = {image.id for image in left.images}
        out += [
            f"image {image_id[:19]}: the test-bed's before the uninstall"
            for image_id in before.image_ids
            if image_id in after.docker.parents and image_id not in listed
        ]
        out += [
            f"volume {volume}: a test-bed container's before the uninstall"
            for volume in before.volumes
            if volume in after.docker.volumes and volume not in left.volumes
        ]
    out += [f"path {p}" for p in after.paths]
    out += [f"engine file {p}" for p in after.engine_files]

    config: dict[str, Any] | None = None
    if after.daemon_json is not None:
        try:
            config = json.loads(after.daemon_json or "{}")
        except ValueError:
            out.append(f"{names.daemon_json} is not JSON")
    if config is not None:
        out += [f"{names.daemon_json} setting {s}" for s in daemon_settings(config, names)]
    if before is not None and before.engine_configured:
        saved = (before.record or {}).get("daemon_json_before") == "saved"
        if saved and after.daemon_json != before.daemon_json_before:
            out.append(f"{names.daemon_json} is not the one found before the test-bed (kept in its record)")
        if not saved and after.daemon_json is not None:
            out.append(f"{names.daemon_json} exists, and there was none before the test-bed wrote its own")
        if after.engine_answered:
            out.append("the Docker engine the test-bed set up and started still runs")
    out += [f"package {p} (the test-bed installed it)" for p in after.installed]

    if caches_purged:
        if after.cache_exists:
            out.append(f"cache {names.cache} (asked to remove it too)")
    elif before is not None:
        out += [
            f"MISSING cache {names.cache / entry}: the uninstall must keep it"
            for entry in before.cache_entries
            if entry not in after.cache_entries
        ]
    return out


# ---- reading the machine ----------------------------------------------------------------------------------------


def _docker_cli(host: str | None) -> list[str]:
    return ["docker", *(["--host", host] if host else [])]


def _run(command: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def _lines(command: list[str]) -> list[str]:
    result = _run(command)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed: {result.stderr.strip()}")
    return list(dict.fromkeys(line for line in result.stdout.splitlines() if line.strip()))


def _inspect(cli: list[str], kind: str, ids: list[str]) -> list[dict[str, Any]]:
    if not ids:
        return []
    result = _run([*cli, kind, "inspect", *ids])
    if result.returncode != 0:
        raise RuntimeError(f"docker {kind} inspect failed: {result.stderr.strip()}")
    return list(json.loads(result.stdout))


def engine_state(host: str | None = None) -> str:
    """running (an engine answers), stopped (docker or dockerd is installed) or missing."""
    if shutil.which("docker") is None:
        return "stopped" if shutil.which("dockerd") else "missing"
    try:
        answered = _run([*_docker_cli(host), "version", "--format", "{{.Server.Version}}"], timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        answered = False
    return "running" if answered else "stopped"


def read_docker(host: str | None = None) -> Docker:
    """Docker's containers, images, volumes and networks; only the engine's state when none answers."""
    state = engine_state(host)
    if state != "running":
        return Docker(engine=state)
    cli = _docker_cli(host)
    containers = [
        Container(
            id=c["Id"],
            name=c["Name"].lstrip("/"),
            image=c["Image"],
            labels=c["Config"].get("Labels") or {},
            volumes=tuple(m["Name"] for m in c.get("Mounts") or [] if m.get("Type") == "volume"),
            networks=tuple((c["NetworkSettings"].get("Networks") or {}).keys()),
        )
        for c in _inspect(cli, "container", _lines([*cli, "ps", "--all", "--quiet", "--no-trunc"]))
    ]
    every = _inspect(cli, "image", _lines([*cli, "image", "ls", "--all", "--quiet", "--no-trunc"]))
    top = set(_lines([*cli, "image", "ls", "--quiet", "--no-trunc"]))
    images = [
        Image(
            id=i["Id"],
            tags=tuple(t for t in i.get("RepoTags") or [] if t != "<none>:<none>"),
            layers=tuple(i.get("RootFS", {}).get("Layers") or []),
            labels=(i.get("Config") or {}).get("Labels") or {},
        )
        for i in every
        if i["Id"] in top
    ]
    return Docker(
        engine=state,
        containers=tuple(containers),
        images=tuple(images),
        volumes=tuple(_lines([*cli, "volume", "ls", "--quiet"])),
        networks=tuple(_lines([*cli, "network", "ls", "--format", "{{.Name}}"])),
        parents={i["Id"]: i.get("Parent") or "" for i in every},
    )


@contextlib.contextmanager
def private_engine() -> Iterator[str]:
    """A dockerd of the check's own on a private socket, over the machine's Docker storage and configuration, for
    looking into an engine that the uninstall stopped; stopped (SIGTERM) on leaving. Yields its host URL."""
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        folder = pathlib.Path(tmp)
        host = f"unix://{folder}/docker.sock"
        log = (folder / "dockerd.log").open("w")
        dockerd = subprocess.Popen(
            ["dockerd", "--host", host, "--pidfile", str(folder / "docker.pid"), "--exec-root", str(folder / "exec")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while engine_state(host) != "running":
                if dockerd.poll() is not None or time.monotonic() > deadline:
                    tail = (folder / "dockerd.log").read_text().splitlines()[-10:]
                    raise RuntimeError("the check's own dockerd did not answer:\n  " + "\n  ".join(tail))
                time.sleep(0.5)
            yield host
        finally:
            dockerd.terminate()
            try:
                dockerd.wait(timeout=60)
            except subprocess.TimeoutExpired:
                dockerd.kill()
                dockerd.wait()
            log.close()


def _record(names: Names) -> tuple[dict[str, Any] | None, str | None]:
    record_file = names.record_dir / "docker_engine.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else None
    before = names.record_dir / "daemon.json.before"
    return record, (before.read_text() if before.is_file() else None)


def _installed(packages: Iterable[str]) -> list[str]:
    if shutil.which("dpkg-query") is None:
        return []
    return [
        p
        for p in packages
        if _run(["dpkg-query", "--show", "--showformat", "${Status}", p]).stdout == "install ok installed"
    ]


def _engine_files(names: Names) -> list[pathlib.Path]:
    return [p for p in (names.capfilter_path, names.launcher_path, names.engine_log, names.record_dir) if p.exists()]


@contextlib.contextmanager
def _looking_into_docker() -> Iterator[tuple[Docker, bool]]:
    """Docker's content, through the engine that answers or else through a private one; and whether one answered."""
    state = engine_state()
    if state == "running":
        yield read_docker(), True
    elif state == "stopped" and shutil.which("dockerd"):
        print("footprint: no Docker engine answers; looking into Docker's storage with a dockerd of its own")
        with private_engine() as host:
            yield read_docker(host), False
    else:
        yield Docker(engine=state), False


def take_snapshot(folder: pathlib.Path, names: Names) -> Snapshot:
    record, daemon_json_before = _record(names)
    with _looking_into_docker() as (docker, _):
        found = footprint(docker, names)
        ids: list[str] = []
        for image in found.images:
            image_id = image.id
            while image_id and image_id not in ids:  # the image and the build parents it hides
                ids.append(image_id)
                image_id = docker.parents.get(image_id, "")
    snapshot = Snapshot(
        record=record,
        daemon_json_before=daemon_json_before,
        engine_configured=record is not None or names.launcher_path.exists() or names.capfilter_path.exists(),
        image_ids=tuple(ids),
        volumes=tuple(dict.fromkeys([v for c in found.containers for v in c.volumes] + list(found.volumes))),
        cache_entries=tuple(e for e in CACHE_KEPT if (names.cache / e).exists()),
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "snapshot.json").write_text(json.dumps(dataclasses.asdict(snapshot), indent=2) + "\n")
    return snapshot


def load_snapshot(folder: pathlib.Path) -> Snapshot:
    data = json.loads((folder / "snapshot.json").read_text())
    return Snapshot(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def observe(names: Names, before: Snapshot | None, packages_kept: bool) -> Observed:
    engine_files = _engine_files(names)  # before a private dockerd could write anything
    packages = [] if packages_kept else list(((before.record or {}) if before else {}).get("packages") or [])
    with _looking_into_docker() as (docker, answered):
        return Observed(
            docker=docker,
            engine_answered=answered,
            paths=tuple(p for p in names.paths if p.exists()),
            engine_files=tuple(engine_files),
            daemon_json=names.daemon_json.read_text() if names.daemon_json.is_file() else None,
            installed=tuple(_installed(packages)),
            cache_entries=tuple(e for e in CACHE_KEPT if (names.cache / e).exists()),
            cache_exists=names.cache.exists(),
        )


def as_json(found: Footprint, docker: Docker, names: Names) -> dict[str, Any]:
    """The footprint as uninstall.yml reads it."""
    return {
        "engine": docker.engine,
        "clusters": list(names.clusters),
        "containers": [{"id": c.id, "name": c.name} for c in found.containers],
        "volumes": list(found.volumes),
        "networks": list(found.networks),
        # Removed by tag (a tagged image goes with its last tag), a dangling one by id.
        "images": [{"id": i.id, "tags": list(i.tags)} for i in found.images],
        "image_refs": [ref for i in found.images for ref in (i.tags or (i.id,))],
        "paths": [str(p) for p in names.paths if p.exists()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="the footprint as JSON (reads only)")
    listing.add_argument("--caches", action="store_true", help="count the cache folder in (PURGE_CACHE)")
    listing.add_argument("--cluster", help="testbed_cluster_name, when not the inventory's")
    listing.add_argument("--registry", help="testbed_registry, when not the inventory's")
    snap = commands.add_parser("snapshot", help="record the machine before an uninstall")
    snap.add_argument("folder", type=pathlib.Path)
    check = commands.add_parser("check", help="name every leftover after an uninstall")
    check.add_argument("--snapshot", type=pathlib.Path, help="the folder a `snapshot` wrote before the uninstall")
    check.add_argument("--caches-purged", action="store_true", help="the uninstall removed the cache folder too")
    check.add_argument("--packages-kept", action="store_true", help="the uninstall kept the recorded packages")
    disc = commands.add_parser("discovery", help="kubectl's discovery cache folders of a kubeconfig's API servers")
    disc.add_argument("kubeconfig", type=pathlib.Path)
    args = parser.parse_args(argv)

    if args.command == "discovery":  # make teardown removes them with the cluster's kubeconfig
        for folder in discovery_dirs(args.kubeconfig):
            print(folder)
        return 0
    if args.command == "list":
        names = read_names(args.cluster, args.registry, caches=args.caches)
        docker = read_docker()
        print(json.dumps(as_json(footprint(docker, names), docker, names), indent=2))
        return 0
    names = read_names()
    if args.command == "snapshot":
        snapshot = take_snapshot(args.folder, names)
        packages = list((snapshot.record or {}).get("packages") or [])
        print(
            f"footprint: snapshot of {len(snapshot.image_ids)} images and {len(snapshot.volumes)} volumes; the engine "
            f"{'was' if snapshot.engine_configured else 'was not'} set up by the test-bed; its record "
            + (f"lists the packages {packages}" if snapshot.record else "is absent")
        )
        return 0
    before = load_snapshot(args.snapshot) if args.snapshot else None
    found = leftovers(observe(names, before, args.packages_kept), names, before, args.caches_purged)
    for line in found:
        print(f"footprint: LEFTOVER {line}")
    if found:
        print(f"footprint: the uninstall left {len(found)} of the test-bed's things (listed above)", file=sys.stderr)
        return 1
    kept = (
        ", ".join(CACHE_KEPT) + " under " + str(names.cache)
        if not args.caches_purged
        else "nothing: the cache folder is gone, as asked"
    )
    print(f"footprint: nothing of the test-bed is left; kept: {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
