"""roles/deploy/tasks/recover.yml (deploy.feature, control-plane tier): a real helm, killed with SIGKILL while its
--wait waits, leaves a real pending revision on the real kube-apiserver; the role's recovery tasks then run through
ansible-playbook (the project's virtual environment's, with the repository's ansible.cfg), as site.yml runs them.

The chart is one StatefulSet (the control plane runs its controller) of `replicas` pods that name a scheduler
nobody runs: 0 replicas is ready at once, 1 never is, so helm's --wait on 1 lasts until helm is killed. The release
lives in the scenario's namespace, which takes helm's Secrets and the StatefulSet with it at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
from typing import Any

import pytest
import yaml
from pytest_bdd import given, parsers, scenarios, then, when

from features.support import World, step
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from harness import manifests
from harness.wait import wait_for

scenarios("deploy.feature")

_PLAYBOOK = pathlib.Path(sys.executable).parent / "ansible-playbook"
#: helm's --timeout for the operations the scenario lets finish, and the role's deploy_wait_timeout.
_WAIT = 60
_WAITING = ("--wait", "--timeout", f"{_WAIT}s")
#: How long helm may take to write its pending revision once started (rendering, reading the release).
_PENDING_TIMEOUT = 60


@dataclasses.dataclass
class Run:
    """One ansible-playbook run of the recovery tasks."""

    returncode: int
    output: str

    @property
    def changed(self) -> int:
        recap = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", self.output)
        assert recap, f"no play recap in the output:\n{self.output}"
        return int(recap.group(1))


@pytest.fixture
def chart(tmp_path: pathlib.Path) -> pathlib.Path:
    """The one-StatefulSet chart."""
    root = tmp_path / "chart"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": "stuck", "version": "0.1.0"}))
    (root / "values.yaml").write_text("replicas: 0\n")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "{{ .Release.Name }}"},
        "spec": {
            "replicas": "REPLICAS",
            "selector": {"matchLabels": {"app": "{{ .Release.Name }}"}},
            "template": {
                "metadata": {"labels": {"app": "{{ .Release.Name }}"}},
                "spec": {
                    "schedulerName": "nobody-schedules-these",
                    "containers": [{"name": "main", "image": "registry.invalid/never-pulled:1"}],
                },
            },
        },
    }
    text = yaml.safe_dump(deployment).replace("REPLICAS", "{{ .Values.replicas }}")
    (root / "templates" / "deployment.yaml").write_text(text)
    return root


@pytest.fixture
def runs() -> list[Run]:
    return []


def _helm(world: World, *args: str) -> list[str]:
    kubeconfig = world.cluster.kubeconfig
    return [str(manifests.helm_binary()), "--kubeconfig", kubeconfig, "--namespace", world.namespace, *args]


def _completed(world: World, *args: str) -> None:
    """helm `args`, which must succeed."""
    done = subprocess.run(_helm(world, *args), capture_output=True, text=True, timeout=_WAIT + 60)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr or done.stdout}"


def _revisions(world: World, release: str) -> list[tuple[int, str]]:
    """helm's Secrets of `release`: (revision, status), oldest first."""
    found = world.api.get(paths.namespace(world.namespace) + "/secrets", labelSelector=f"owner=helm,name={release}")
    labels = [item["metadata"]["labels"] for item in found["items"]]
    return sorted((int(label["version"]), label["status"]) for label in labels)


def _killed_once_pending(world: World, args: list[str], release: str, revision: int, status: str) -> None:
    """Run helm `args` (with --wait) and SIGKILL it once `release` has `revision` in `status`."""
    proc = subprocess.Popen(_helm(world, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(
            f"revision {revision} of {release} {status}",
            lambda: (revision, status) in _revisions(world, release) or proc.poll() is not None,
            timeout=_PENDING_TIMEOUT,
        )
        assert proc.poll() is None, f"helm ended before it was killed: {proc.communicate()[0]}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert _revisions(world, release)[-1] == (revision, status)


@given(step('the release "{release}" of the one-StatefulSet chart with {replicas:d} replicas, deployed'))
def deployed(world: World, chart: pathlib.Path, release: str, replicas: int) -> None:
    _completed(world, "install", release, str(chart), "--set", f"replicas={replicas}", *_WAITING)
    assert _revisions(world, release) == [(1, "deployed")]


@when(
    step('helm upgrades "{release}" to {replicas:d} replica and is killed once revision {revision:d} is "{status:q}"')
)
def upgrade_killed(world: World, chart: pathlib.Path, release: str, replicas: int, revision: int, status: str) -> None:
    args = ["upgrade", release, str(chart), "--set", f"replicas={replicas}", "--wait", "--timeout", "600s"]
    _killed_once_pending(world, args, release, revision, status)


@when(
    step('helm installs "{release}" with {replicas:d} replica and is killed once revision {revision:d} is "{status:q}"')
)
def install_killed(world: World, chart: pathlib.Path, release: str, replicas: int, revision: int, status: str) -> None:
    args = ["install", release, str(chart), "--set", f"replicas={replicas}", "--wait", "--timeout", "600s"]
    _killed_once_pending(world, args, release, revision, status)


@when(parsers.parse("the deploy role's recovery runs with deploy_pending_stale_after {seconds:d}"))
def recovery(world: World, tmp_path: pathlib.Path, runs: list[Run], seconds: int) -> None:
    playbook = tmp_path / "recover.yml"
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "deploy", "tasks_from": "recover"}}],
    }
    playbook.write_text(yaml.safe_dump([play]))
    extra: dict[str, Any] = {
        "testbed_facts_kubeconfig": world.cluster.kubeconfig,
        "testbed_facts_bin": str(manifests.helm_binary().parent),
        "testbed_system_namespace": world.namespace,
        "deploy_release": "stuck",
        "deploy_wait_timeout": _WAIT,
        "deploy_pending_stale_after": seconds,
    }
    done = subprocess.run(
        [str(_PLAYBOOK), str(playbook), "-e", json.dumps(extra)],
        cwd=manifests.ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(manifests.ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        timeout=_WAIT + 120,
    )
    runs.append(Run(done.returncode, done.stdout + done.stderr))


@then(step('the run failed saying revision {revision:d} is "{status}" and another helm operation may still be running'))
def run_failed(runs: list[Run], revision: int, status: str) -> None:
    run = runs[-1]
    assert run.returncode != 0, run.output
    text = " ".join(run.output.split())
    assert f"has revision {revision} {status} since" in text, run.output
    assert "another helm operation on it may still be running" in text, run.output


@then(parsers.parse("the run succeeded with {count:d} task changed"))
@then(parsers.parse("the run succeeded with {count:d} tasks changed"))
def run_succeeded(runs: list[Run], count: int) -> None:
    run = runs[-1]
    assert run.returncode == 0, run.output
    assert run.changed == count, run.output


@then(step('the last revision of "{release}" is {revision:d}, "{status}"'))
def last_revision(world: World, release: str, revision: int, status: str) -> None:
    assert _revisions(world, release)[-1] == (revision, status), _revisions(world, release)


@then(step('the release "{release}" has no revision'))
def no_revision(world: World, release: str) -> None:
    assert _revisions(world, release) == []


@then(step('the StatefulSet "{name}" asks for {replicas:d} replicas'))
def deployment_replicas(world: World, name: str, replicas: int) -> None:
    assert world.api.get(paths.statefulset(world.namespace, name))["spec"]["replicas"] == replicas


@then(step('the StatefulSet "{name}" is gone'))
def deployment_gone(world: World, name: str) -> None:
    with pytest.raises(NotFound):
        world.api.get(paths.statefulset(world.namespace, name))


@then(step('helm upgrades "{release}" to {replicas:d} replicas'))
def upgrade_works(world: World, chart: pathlib.Path, release: str, replicas: int) -> None:
    _completed(world, "upgrade", release, str(chart), "--set", f"replicas={replicas}", *_WAITING)
    assert _revisions(world, release)[-1] == (4, "deployed")
