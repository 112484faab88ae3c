"""The test-bed's roles document what a user may set, and site.yml applies each of them once.

Every role has a README.md, and it names every variable of the role's defaults/main.yml (so the two cannot drift:
a new default without a line in the README, or a README line for a default that is gone, fails here)."""

import pathlib
import re
import tomllib

import jinja2
import pytest
import yaml

from tests import ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())


def defaults(role: str) -> dict:
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def test_there_are_roles():
    assert "deploy" in ROLES and "testbed_facts" in ROLES


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_readme(role):
    readme = ROOT / "roles" / role / "README.md"
    assert readme.is_file(), f"roles/{role} has no README.md"
    assert readme.read_text().startswith(f"# {role}\n"), f"roles/{role}/README.md should start with '# {role}'"


@pytest.mark.parametrize("role", ROLES)
def test_the_readme_names_every_default(role):
    text = (ROOT / "roles" / role / "README.md").read_text()
    missing = [key for key in defaults(role) if f"`{key}`" not in text]
    assert not missing, f"roles/{role}/README.md does not name these defaults (as `name`): {missing}"


def defaults_table(text: str) -> list[str]:
    """The names in the first column of the README's `| variable | default | meaning |` tables."""
    names, in_table = [], False
    for line in text.splitlines():
        if line.replace(" ", "") == "|variable|default|meaning|":
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            names += re.findall(r"^\| `(\w+)` \|", line)
    return names


@pytest.mark.parametrize("role", ROLES)
def test_the_readme_lists_no_default_that_is_gone(role):
    listed = defaults_table((ROOT / "roles" / role / "README.md").read_text())
    stale = sorted(set(listed) - set(defaults(role)))
    assert not stale, f"roles/{role}/README.md lists variables that are not in defaults/main.yml: {stale}"


def _plays(playbook: pathlib.Path):
    """The plays of a playbook, following import_playbook as Ansible does (relative to the importing file)."""
    for entry in yaml.safe_load(playbook.read_text()):
        imported = entry.get("ansible.builtin.import_playbook") or entry.get("import_playbook")
        if imported:
            yield from _plays(playbook.parent / imported)
        else:
            yield entry


def _roles(play: dict) -> list[str]:
    return [r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])]


def _facts_includes(play: dict) -> list[dict]:
    return [
        t
        for t in play.get("pre_tasks", [])
        if (t.get("ansible.builtin.include_role") or {}).get("name") == "testbed_facts"
    ]


def test_site_applies_each_role_once():
    applied = [role for play in _plays(ROOT / "site.yml") for role in _roles(play)]
    twice = sorted({role for role in applied if applied.count(role) > 1})
    assert not twice, f"site.yml applies these roles more than once: {twice}"
    assert sorted(applied) == sorted(set(ROLES) - {"testbed_facts"}), "every role but testbed_facts, once"


@pytest.mark.parametrize("playbook", sorted(p.name for p in (ROOT / "playbooks").glob("*.yml")))
def test_each_play_includes_the_facts_once_per_run(playbook):
    """testbed_facts (the input checks first) starts every play that stands on its own, and runs only when no
    earlier play of the run did: once per site.yml, and each playbook still runs alone."""
    for play in _plays(ROOT / "playbooks" / playbook):
        (include,) = _facts_includes(play)
        assert include["when"] == "testbed_facts_repo is not defined"
        assert "always" in include["tags"] and include["ansible.builtin.include_role"]["apply"] == {"tags": ["always"]}
        assert play["pre_tasks"][0] is include, "the facts (and input checks) come first"


def test_every_program_image_is_a_thin_layer_running_a_console_script():
    """app_images builds each of app_images_programs from images/<folder>/Dockerfile on the shared environment:
    that Dockerfile exists, starts FROM ${APP_IMAGE}, runs as uid 1000 and its ENTRYPOINT is a console script of
    pyproject.toml (so a program added to the package, such as gpu-board, is one the test-bed can build)."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    programs = defaults("app_images")["app_images_programs"]
    assert {"scheduler", "webhook", "check", "agent", "board"} <= set(programs)
    for key, program in programs.items():
        dockerfile = (ROOT / "images" / program["folder"] / "Dockerfile").read_text()
        assert "FROM ${APP_IMAGE}" in dockerfile and "\nUSER 1000:1000\n" in dockerfile, key
        (entrypoint,) = re.findall(r"^ENTRYPOINT \[\"/opt/gpu-scheduling/bin/([\w-]+)\"\]$", dockerfile, re.MULTILINE)
        assert entrypoint in scripts, (key, entrypoint)
        assert program["image"] == entrypoint, f"{key}: the image is named after its program (images/README.md)"


@pytest.mark.parametrize("offline", [True, False])
@pytest.mark.parametrize("cgroup_v1", [True, False])
def test_the_kind_configuration_tells_the_kubelets_about_cgroup_v1_only_on_a_v1_host(offline, cgroup_v1):
    # kind applies each kubeadmConfigPatches entry to the kubeadm document of its kind; failCgroupV1: false only where
    # the host (and so every kind node) runs cgroup v1, and kind's defaults on a cgroup v2 host.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["bool"] = bool
    template = env.from_string((ROOT / "roles/kind_cluster/templates/kind-config.yaml.j2").read_text())
    config = yaml.safe_load(
        template.render(
            testbed_cluster_name="gpu-cluster",
            testbed_facts_offline=offline,
            kind_cluster_cgroup_v1=cgroup_v1,
            etcd_image_tag="3.7.3-0",
            testbed_facts_node_image="gpu-testbed/kind-node:v1.37.2-abc",
            testbed_worker_nodes=["node1", "node2"],
        )
    )
    patches = [yaml.safe_load(p) for p in config.get("kubeadmConfigPatches") or []]
    kubelet = [p for p in patches if p["kind"] == "KubeletConfiguration"]
    v1 = {"kind": "KubeletConfiguration", "failCgroupV1": False, "cgroupDriver": "cgroupfs"}
    assert kubelet == ([v1] if cgroup_v1 else [])
    # the kubelet's cgroup driver and containerd's runc options agree: cgroupfs on v1, kind's systemd on v2
    runc = [tomllib.loads(p) for p in config["containerdConfigPatches"] if "runtimes.runc.options" in p]
    cri = 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options'
    assert runc == ([{"plugins": tomllib.loads(f"[{cri}]\nSystemdCgroup = false")["plugins"]}] if cgroup_v1 else [])
    etcd = [p["etcd"]["local"]["imageTag"] for p in patches if p["kind"] == "ClusterConfiguration"]
    assert etcd == (["3.7.3-0"] if offline else [])
    assert [n["kubeadmConfigPatches"] for n in config["nodes"] if n["role"] == "worker"]
