"""kubectl gpu (cli.feature): the real `kubectl-gpu` console script run as a subprocess against the cluster, and once
through the toolchain's kubectl as its plugin.

Every run gets KUBECONFIG=<the scenario's file>:<the cluster's kubeconfig>. The scenario's file holds only a context
`scenario` (the cluster's cluster and user, the scenario's namespace) and makes it the current context, so the CLI
finds its namespace in the context, from a merged kubeconfig, as kubectl would.

Expected text may hold `{ns}` (the scenario's namespace), `{tmp}` (a folder of the scenario's), and the test-bed's
`{system}`, `{scheduler}`, `{webhook}`, `{agent}`. In a table cell or a line pattern, `*` matches any text; in a
"lines matching" docstring, each line's runs of spaces match any run of spaces, and its lines must appear in the
output in that order. Steps that read the shared cluster run the command again until what they expect appears or 30
seconds have passed (other scenarios' leftovers are released asynchronously).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from pytest_bdd import given, parsers, scenarios, then, when

from features.support import (
    AGENT_DAEMONSET,
    SCHEDULER_DEPLOYMENT,
    SYSTEM_NAMESPACE,
    WEBHOOK_DEPLOYMENT,
    World,
    claim_status,
    gang_member_body,
    get_pod,
    step,
)
from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from hack import toolchain
from harness.components import SCRIPTS
from harness.controlplane import kubeconfig as make_kubeconfig
from harness.inventory import publish
from harness.wait import wait_for

scenarios("cli.feature")

KUBECTL_GPU = SCRIPTS / "kubectl-gpu"
#: A folder whose sitecustomize makes a background watch write its stacks on SIGUSR1 (the interrupt step's help).
STACKS = pathlib.Path(__file__).parent / "stacks"
#: How long a step that reads the shared cluster keeps trying.
EVENTUALLY = 30.0


# ---- running the CLI -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    argv: list[str]
    code: int
    out: str
    err: str
    elapsed: float = 0.0

    def __str__(self) -> str:
        return f"$ {' '.join(self.argv)}\n[exit {self.code}]\n--- stdout\n{self.out}--- stderr\n{self.err}"


@dataclasses.dataclass
class Cli:
    world: World
    tmp: pathlib.Path
    kubeconfig_env: str
    last: Result | None = None
    background: subprocess.Popen[str] | None = None
    watch_lines: list[str] = dataclasses.field(default_factory=list)
    other_kubeconfigs: dict[str, pathlib.Path] = dataclasses.field(default_factory=dict)
    exec_cluster: dict[str, Any] = dataclasses.field(default_factory=dict)  # what the exec plugin must be told

    def expand(self, text: str) -> str:
        return (
            text.replace("{ns}", self.world.namespace)
            .replace("{tmp}", str(self.tmp))
            .replace("{system}", SYSTEM_NAMESPACE)
            .replace("{scheduler}", SCHEDULER_DEPLOYMENT)
            .replace("{webhook}", WEBHOOK_DEPLOYMENT)
            .replace("{agent}", AGENT_DAEMONSET)
        )

    def env(self, kubeconfig: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "KUBECONFIG")}
        env["KUBECONFIG"] = kubeconfig or self.kubeconfig_env
        env["PATH"] = f"{SCRIPTS}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(
        self, command: str, *, stdin: str | None = None, kubeconfig: str | None = None, program: str | None = None
    ) -> Result:
        """`command` is "kubectl gpu ARGS" (run as kubectl-gpu ARGS), or ARGS for `program`."""
        words = self.expand(command).split()
        if program is None:
            assert words[:2] == ["kubectl", "gpu"], f"not a kubectl gpu command: {command!r}"
            argv = [str(KUBECTL_GPU), *words[2:]]
        else:
            argv = [program, *words]
        started = time.monotonic()
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(kubeconfig),
            timeout=120,
            check=False,
        )
        self.last = Result(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)
        assert "Traceback" not in proc.stderr, str(self.last)
        return self.last

    def until(self, command: str, check: Callable[[Result], None], timeout: float = EVENTUALLY) -> Result:
        """Run `command` until `check` passes on its result (its AssertionError otherwise, after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.run(command)
            try:
                check(result)
                return result
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(1)


@pytest.fixture
def cli(world: World, tmp_path: pathlib.Path) -> Iterator[Cli]:
    cluster_kubeconfig = pathlib.Path(world.cluster.kubeconfig)
    doc = yaml.safe_load(cluster_kubeconfig.read_text())
    contexts = {c["name"]: c["context"] for c in doc["contexts"]}
    current = contexts[doc["current-context"]]
    overlay = tmp_path / "scenario.kubeconfig"
    overlay.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "contexts": [
                    {
                        "name": "scenario",
                        "context": {
                            "cluster": current["cluster"],
                            "user": current["user"],
                            "namespace": world.namespace,
                        },
                    }
                ],
                "current-context": "scenario",
            }
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    state = Cli(world, work, f"{overlay}{os.pathsep}{cluster_kubeconfig}")
    yield state
    if state.background is not None and state.background.poll() is None:
        state.background.kill()
        state.background.wait(timeout=10)


# ---- matching output -------------------------------------------------------------------------------------------


def glob(pattern: str) -> str:
    """A regular expression for `pattern`, in which `*` matches any text and everything else is literal."""
    return ".*".join(re.escape(part) for part in pattern.split("*"))


def line_regex(pattern: str) -> re.Pattern[str]:
    """A line pattern: its runs of spaces match any run of spaces, `*` any text (spaces included)."""
    return re.compile(r"\s+".join(glob(token) for token in pattern.split()))


def lines_in_order(text: str, patterns: list[str]) -> None:
    lines = [line.strip() for line in text.splitlines()]
    at = 0
    for pattern in patterns:
        regex = line_regex(pattern.strip())
        for i in range(at, len(lines)):
            if regex.fullmatch(lines[i]):
                at = i + 1
                break
        else:
            raise AssertionError(f"no line matching {pattern.strip()!r} (in order) in:\n{text}")


def parse_table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a table printed as kubectl prints one: each column starts where its header does, with at
    least three spaces before it in every line."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no table printed"
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    for i, start in enumerate(starts[1:], 1):
        assert header[start - 3 : start] == "   ", f"fewer than 3 spaces before column {names[i]}: {header!r}"
    rows = []
    for line in lines[1:]:
        cells = []
        for i, start in enumerate(starts):
            if i:
                assert line[start - 3 : start].strip() == "", f"column {names[i]} is not aligned in {line!r}"
            end = starts[i + 1] if i + 1 < len(starts) else len(line)
            cells.append(line[start:end].strip())
        rows.append(cells)
    return names, rows


def cells_match(expected: list[str], actual: list[str]) -> bool:
    return len(expected) == len(actual) and all(
        re.fullmatch(glob(e), a) is not None for e, a in zip(expected, actual, strict=True)
    )


def check_table(cli: Cli, result: Result, datatable: list[list[str]], *, exact: bool) -> None:
    assert result.code == 0, str(result)
    expected = [[cli.expand(cell.strip()) for cell in row] for row in datatable]
    names, rows = parse_table(result.out)
    assert names == expected[0], f"header {names} != {expected[0]}\n{result}"
    if exact:
        assert len(rows) == len(expected) - 1 and all(
            cells_match(e, a) for e, a in zip(expected[1:], rows, strict=True)
        ), f"expected exactly {expected[1:]}\n{result}"
        return
    for want in expected[1:]:
        assert any(cells_match(want, row) for row in rows), f"no row {want}\n{result}"


def list_items(result: Result, fmt: str) -> list[dict[str, Any]]:
    assert result.code == 0, str(result)
    doc = json.loads(result.out) if fmt == "json" else yaml.safe_load(result.out)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List" and doc["metadata"] == {"resourceVersion": ""}, doc
    for item in doc["items"]:
        assert item["apiVersion"] and item["kind"], item
        assert "managedFields" not in item["metadata"], "kubectl does not print managedFields"
    items: list[dict[str, Any]] = doc["items"]
    return items


def refs(items: list[dict[str, Any]]) -> list[str]:
    return [f"{i['kind']}/{i['metadata']['name']}" for i in items]


# ---- running and reading: steps -----------------------------------------------------------------------------------


@when(step('I run "{command:q}"'))
def run_command(cli: Cli, command: str) -> None:
    cli.run(command)


@when(step('I run "{command:q}" with the input'))
def run_with_input(cli: Cli, command: str, docstring: str) -> None:
    cli.run(command, stdin=cli.expand(docstring) + "\n")


@when(step('I run "{command:q}" as "{user:q}"'))
def run_as(cli: Cli, command: str, user: str) -> None:
    cli.run(f"{command} --kubeconfig {cli.other_kubeconfigs[user]} -n {{ns}}")


@then(step("it exits with status {code:d}"))
def exits_with(cli: Cli, code: int) -> None:
    assert cli.last is not None and cli.last.code == code, str(cli.last)


def _stderr_lines(cli: Cli, docstring: str) -> None:
    assert cli.last is not None
    for pattern in cli.expand(docstring).splitlines():
        assert any(re.fullmatch(glob(pattern), line) for line in cli.last.err.splitlines()), (
            f"no stderr line {pattern!r}\n{cli.last}"
        )


@then(step("it exits with status {code:d}, prints nothing and says on stderr"))
def exits_quietly_saying(cli: Cli, code: int, docstring: str) -> None:
    exits_with(cli, code)
    assert cli.last is not None and cli.last.out == "", str(cli.last)
    _stderr_lines(cli, docstring)


@then(step("it exits with status {code:d} and says on stderr"))
def exits_saying(cli: Cli, code: int, docstring: str) -> None:
    exits_with(cli, code)
    _stderr_lines(cli, docstring)


@then(step('its output has the row "{name:q}"'))
def output_has_row(cli: Cli, name: str) -> None:
    assert cli.last is not None
    _, rows = parse_table(cli.last.out)
    assert [r[0] for r in rows] == [name], str(cli.last)


@then("it prints exactly")
def prints_exactly(cli: Cli, docstring: str) -> None:
    assert cli.last is not None and cli.last.code == 0, str(cli.last)
    assert cli.last.out == cli.expand(docstring) + "\n", str(cli.last)


@then("it prints lines matching")
def prints_lines(cli: Cli, docstring: str) -> None:
    assert cli.last is not None and cli.last.code == 0, str(cli.last)
    lines_in_order(cli.last.out, cli.expand(docstring).splitlines())


@then(step("it exits with status {code:d} and prints lines matching"))
def exits_with_lines(cli: Cli, code: int, docstring: str) -> None:
    exits_with(cli, code)
    assert cli.last is not None
    lines_in_order(cli.last.out, cli.expand(docstring).splitlines())


@then("it prints a table with the rows")
def prints_table_rows(cli: Cli, datatable: list[list[str]]) -> None:
    assert cli.last is not None
    check_table(cli, cli.last, datatable, exact=False)


@then(step('it prints a {fmt} List of "{expected:q}"'))
def prints_list(cli: Cli, fmt: str, expected: str) -> None:
    assert cli.last is not None
    assert refs(list_items(cli.last, fmt)) == expected.split(","), str(cli.last)


@then(step('"{command:q}" prints the table'))
def command_prints_table(cli: Cli, command: str, datatable: list[list[str]]) -> None:
    cli.until(command, lambda r: check_table(cli, r, datatable, exact=True))


@then(step('"{command:q}" prints a table with the rows'))
def command_prints_rows(cli: Cli, command: str, datatable: list[list[str]]) -> None:
    cli.until(command, lambda r: check_table(cli, r, datatable, exact=False))


@then(step('"{command:q}" prints lines matching'))
def command_prints_lines(cli: Cli, command: str, docstring: str) -> None:
    def check(result: Result) -> None:
        assert result.code == 0, str(result)
        lines_in_order(result.out, cli.expand(docstring).splitlines())

    cli.until(command, check)


@then(step('"{command:q}" prints exactly'))
def command_prints_exactly(cli: Cli, command: str, docstring: str) -> None:
    def check(result: Result) -> None:
        assert result.code == 0 and result.out == cli.expand(docstring) + "\n", str(result)

    cli.until(command, check)


@then(step('"{command:q}" prints a {fmt} List of "{expected:q}"'))
def command_prints_list(cli: Cli, command: str, fmt: str, expected: str) -> None:
    cli.until(command, lambda r: prints_list_check(r, fmt, expected.split(","), exact=True))


@then(step('"{command:q}" prints a {fmt} List including "{expected:q}"'))
def command_prints_list_including(cli: Cli, command: str, fmt: str, expected: str) -> None:
    cli.until(command, lambda r: prints_list_check(r, fmt, expected.split(","), exact=False))


def prints_list_check(result: Result, fmt: str, expected: list[str], *, exact: bool) -> None:
    found = refs(list_items(result, fmt))
    if exact:
        assert found == expected, f"{found} != {expected}\n{result}"
    else:
        assert set(expected) <= set(found), f"{expected} not all in {found}\n{result}"


@then(step('"{command:q}" prints the {fmt} {kind} "{name:q}"'))
def command_prints_object(cli: Cli, command: str, fmt: str, kind: str, name: str) -> None:
    result = cli.run(command)
    assert result.code == 0, str(result)
    obj = json.loads(result.out) if fmt == "json" else yaml.safe_load(result.out)
    assert (obj["kind"], obj["metadata"]["name"]) == (kind, name), str(result)
    assert obj["apiVersion"] == constants.API_VERSION and "managedFields" not in obj["metadata"]
    # The object as the API has it (the status the scheduler wrote included).
    api_path = {
        "GpuNodeStatus": lambda: paths.gpu_node_status(name),
        "GpuClaim": lambda: paths.gpu_claim(cli.world.namespace, name),
        "GpuSchedulingPolicy": lambda: paths.scheduling_policy(name),
    }[kind]()
    assert obj["metadata"]["uid"] == cli.world.api.get(api_path)["metadata"]["uid"]
    assert obj.get("spec") is not None


# ---- scenario set-up ---------------------------------------------------------------------------------------------


@given(step('node2 reports utilization "{percents:q}" percent and {used:d} GiB used of {total:d} GiB per GPU'))
def node2_utilization(world: World, percents: str, used: int, total: int) -> None:
    status = simulated_status()
    for device, percent in zip(status["devices"], percents.split(","), strict=True):
        device.update(utilizationPercent=int(percent), memoryUsedMiB=used * 1024, memoryTotalMiB=total * 1024)
    publish(world.cluster.kubeconfig, {"node2": status})


@then(step('the GpuClaim "{name:q}" waits with a message containing "{fragment:q}"'))
def claim_waits(world: World, name: str, fragment: str) -> None:
    wait_for(
        f"GpuClaim {name} Pending mentioning {fragment!r}",
        lambda: (s := claim_status(world, name)).get("phase") == "Pending" and fragment in s.get("message", ""),
        timeout=60,
    )


@given(step('a user "{user:q}" whom RBAC grants nothing'))
def unprivileged_user(cli: Cli, world: World, user: str) -> None:
    cp = world.cluster.cp
    if cp is None:
        pytest.skip("issues a client certificate from the test control plane's CA (control-plane tier)")
    pair = cp.ca.issue(f"cli-{user}-{world.namespace}", user, client=True)
    path = cli.tmp / f"{user}.kubeconfig"
    path.write_text(make_kubeconfig(cp.server, cp.ca.pem, pair, user=user))
    cli.other_kubeconfigs[user] = path


@then(
    step(
        '"{command:q}" reports {bound:d} Bound and {pending:d} Pending claim, the pending pod "{pod:q}" and node2 '
        "with {free:d} free GPUs"
    )
)
def status_document(cli: Cli, command: str, bound: int, pending: int, pod: str, free: int) -> None:
    def check(result: Result) -> None:
        assert result.code == 0, str(result)
        doc = json.loads(result.out) if "-o json" in command else yaml.safe_load(result.out)
        assert doc["claims"] == {
            "namespace": cli.world.namespace,
            "phases": {"Pending": pending, "Reserved": 0, "Bound": bound, "Failed": 0},
        }, doc["claims"]
        assert [(p["namespace"], p["name"], p["gpus"]) for p in doc["pendingPods"]] == [
            (cli.world.namespace, pod, f"claim/{pod.rsplit('-', 1)[0]}")
        ]
        node2 = next(n for n in doc["nodes"] if n["name"] == "node2")
        assert (node2["gpus"], node2["free"], node2["unhealthy"], node2["nodeExists"]) == (8, free, 0, True)
        assert doc["leader"]["current"] is True and doc["leader"]["holderIdentity"]
        assert doc["gpus"]["total"] == sum(n["gpus"] for n in doc["nodes"])
        assert doc["policy"]["exists"] is False

    cli.until(command, check)


# ---- submit ------------------------------------------------------------------------------------------------------


@then(step('the GpuClaim "{name:q}" is Bound with {count:d} GPUs by strategy "{strategy:q}"'))
def claim_bound_by(world: World, name: str, count: int, strategy: str) -> None:
    status = wait_for(
        f"GpuClaim {name} Bound", lambda: (s := claim_status(world, name)).get("phase") == "Bound" and s, timeout=60
    )
    assert len(status["gpuIds"]) == count and status["strategy"] == strategy, status
    pod = wait_for("its pod bound", lambda: get_pod(world, name)["spec"].get("nodeName") and get_pod(world, name))
    assert pod["metadata"]["annotations"][constants.ALLOCATED_ANNOTATION] == status["allocated"]


def _managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["manager"]: m for m in obj["metadata"].get("managedFields") or []}


@then(step('the GpuClaim "{claim:q}" and the pod "{pod:q}" were applied by the field manager "{manager:q}"'))
def applied_by(world: World, claim: str, pod: str, manager: str) -> None:
    for obj in (world.api.get(paths.gpu_claim(world.namespace, claim)), get_pod(world, pod)):
        entry = _managers(obj).get(manager)
        assert entry is not None and entry["operation"] == "Apply", obj["metadata"].get("managedFields")


@then(step('there is no GpuClaim "{claim:q}" and no pod "{pod:q}"'))
def nothing_applied(world: World, claim: str, pod: str) -> None:
    for path in (paths.gpu_claim(world.namespace, claim), paths.pod(world.namespace, pod)):
        with pytest.raises(NotFound):
            world.api.get(path)


# ---- strategy ----------------------------------------------------------------------------------------------------


@pytest.fixture
def policy_undo(world: World) -> Iterator[None]:
    """The policy is cluster-wide: the scenario that changes it removes it before and after."""
    with contextlib.suppress(NotFound):
        world.api.delete(paths.scheduling_policy(), missing_ok=False)
    yield
    with contextlib.suppress(NotFound):
        world.api.delete(paths.scheduling_policy(), missing_ok=False)


@given("there is no GpuSchedulingPolicy")
def no_policy(policy_undo: None, world: World) -> None:
    wait_for("no GpuSchedulingPolicy", lambda: _absent(world, paths.scheduling_policy()))


def _absent(world: World, path: str) -> bool:
    try:
        world.api.get(path)
    except NotFound:
        return True
    return False


@then(step('the GpuSchedulingPolicy says defaultStrategy "{strategy:q}" and the scheduler applies "{applied:q}"'))
def policy_applied(world: World, strategy: str, applied: str) -> None:
    policy = world.api.get(paths.scheduling_policy())
    assert policy["spec"]["defaultStrategy"] == strategy, policy
    assert policy["status"]["strategy"] == applied, policy
    assert policy["status"]["observedGeneration"] >= policy["metadata"]["generation"], policy


@then(
    step(
        'the GpuSchedulingPolicy says defaultStrategy "{strategy:q}" and queueOrder "{order:q}", both applied by '
        '"{manager:q}"'
    )
)
def policy_fields(world: World, strategy: str, order: str, manager: str) -> None:
    policy = world.api.get(paths.scheduling_policy())
    assert (policy["spec"]["defaultStrategy"], policy["spec"]["queueOrder"]) == (strategy, order), policy
    entry = _managers(policy)[manager]
    assert entry["operation"] == "Apply"
    owned = entry["fieldsV1"]["f:spec"]
    assert "f:defaultStrategy" in owned and "f:queueOrder" in owned, entry


@when("the scheduler is stopped")
def stop_scheduler(world: World) -> None:
    assert world.cluster.components is not None
    world.cluster.components.scheduler.stop()


@when("the webhook is stopped")
def stop_webhook(world: World) -> None:
    assert world.cluster.components is not None
    world.cluster.components.webhook.stop()


# ---- watch -------------------------------------------------------------------------------------------------------


@when(step('"{command:q}" runs in the background'))
def watch_in_background(cli: Cli, command: str) -> None:
    words = cli.expand(command).split()
    assert words[:2] == ["kubectl", "gpu"]
    proc = subprocess.Popen(
        [str(KUBECTL_GPU), *words[2:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli.env(), "PYTHONPATH": str(STACKS)},
    )
    cli.background = proc

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            cli.watch_lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()


@then("the watch prints within 30 seconds lines matching")
def watch_prints(cli: Cli, docstring: str) -> None:
    patterns = [line_regex(p.strip()) for p in cli.expand(docstring).splitlines()]

    def all_seen() -> bool:
        lines = list(cli.watch_lines)
        return all(any(p.fullmatch(line.strip()) for line in lines) for p in patterns)

    try:
        wait_for("the watch's lines", all_seen, timeout=EVENTUALLY)
    except AssertionError:
        raise AssertionError(f"expected {docstring!r}; the watch printed:\n" + "\n".join(cli.watch_lines)) from None


@when("the watch is interrupted")
def interrupt_watch(cli: Cli) -> None:
    proc = cli.background
    assert proc is not None and proc.poll() is None, "the watch ended by itself"
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # features/cli/stacks: every thread's and task's stack to stderr
        time.sleep(3)
        proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"the watch did not exit within 30 s of SIGINT; its stderr, stacks last:\n{err}") from None
    cli.last = Result(["kubectl-gpu", "watch"], proc.returncode, "\n".join(cli.watch_lines) + (out or ""), err)


@then(step("it exits with status {code:d} without a traceback"))
def exits_cleanly(cli: Cli, code: int) -> None:
    assert cli.last is not None and cli.last.code == code, str(cli.last)
    assert "Traceback" not in cli.last.err and "Unclosed" not in cli.last.err, str(cli.last)


@then(step("it exits with status {code:d} after about {seconds:d} seconds and prints nothing"))
def exits_after(cli: Cli, code: int, seconds: int) -> None:
    assert cli.last is not None and (cli.last.code, cli.last.out) == (code, ""), str(cli.last)
    assert seconds <= cli.last.elapsed < seconds + 15, cli.last.elapsed


@then(step('every line it prints is a JSON change, among them the snapshot of "{kind:q}" "{name:q}"'))
def json_changes(cli: Cli, kind: str, name: str) -> None:
    assert cli.last is not None and cli.last.code == 0, str(cli.last)
    events = [json.loads(line) for line in cli.last.out.splitlines()]
    assert events, str(cli.last)
    for event in events:
        assert set(event) == {"time", "event", "kind", "namespace", "name", "from", "to", "detail"}, event
    assert any(
        e["event"] == "snapshot" and e["kind"].lower() == kind and e["name"] == name and e["from"] is None
        for e in events
    ), events


@when(step("GPU {gpu:d} of {node} is reported Unhealthy"))
def unhealthy_gpu(world: World, inventory_undo: list[str], gpu: int, node: str) -> None:
    status = simulated_status()
    status["devices"][gpu]["health"] = "Unhealthy"
    status["unhealthy"], status["free"] = 1, status["free"] - 1
    publish(world.cluster.kubeconfig, {node: status})
    inventory_undo.append(node)


# ---- health ------------------------------------------------------------------------------------------------------


@pytest.fixture
def inventory_undo(world: World) -> Iterator[list[str]]:
    """Nodes whose inventory a scenario changed get the healthy simulated one back; inventories of nodes that do
    not exist are deleted."""
    changed: list[str] = []
    yield changed
    existing = {n["metadata"]["name"] for n in world.api.get(paths.NODES)["items"]}
    for node in dict.fromkeys(changed):
        if node in existing:
            publish(world.cluster.kubeconfig, {node: simulated_status()})
        else:
            world.api.delete(paths.gpu_node_status(node))


@when(step('a GpuNodeStatus is written for "{node:q}", a node that does not exist'))
def ghost_inventory(world: World, inventory_undo: list[str], node: str) -> None:
    inventory_undo.append(node)
    publish(world.cluster.kubeconfig, {node: simulated_status()})


@when(step("the Lease of GPU {gpu:d} of {node} is deleted"))
def delete_lease(world: World, gpu: int, node: str) -> None:
    world.api.delete(paths.lease(constants.LEASE_NAMESPACE, objects.lease_name(node, gpu)), missing_ok=False)


@then(step('"{command:q}" reports every check OK'))
def health_document_ok(cli: Cli, command: str) -> None:
    def check(result: Result) -> None:
        assert result.code == 0, str(result)
        doc = json.loads(result.out) if "-o json" in command else yaml.safe_load(result.out)
        assert doc["healthy"] is True, doc
        names = [c["check"] for c in doc["checks"]]
        assert {"scheduler-leader", "webhook", "inventories", "gpu-leases"} <= set(names), names
        assert all(c["status"] == "OK" and c["detail"] for c in doc["checks"]), doc

    cli.until(command, check)


@then(step('"{command:q}" reports only OK checks and exits with status 0'))
def health_all_ok(cli: Cli, command: str) -> None:
    def check(result: Result) -> None:
        assert result.code == 0, str(result)
        statuses = [line.split()[0] for line in result.out.splitlines() if line.strip()]
        assert statuses and set(statuses) == {"OK"}, str(result)

    cli.until(command, check, timeout=120)


# ---- exec credential plugin ------------------------------------------------------------------------------------


@given("a kubeconfig whose user is an exec plugin printing the administrator's client certificate")
def exec_kubeconfig(cli: Cli, world: World) -> None:
    admin = yaml.safe_load(pathlib.Path(world.cluster.kubeconfig).read_text())
    context = {c["name"]: c["context"] for c in admin["contexts"]}[admin["current-context"]]
    cluster = {c["name"]: c["cluster"] for c in admin["clusters"]}[context["cluster"]]
    user = {u["name"]: u["user"] for u in admin["users"]}[context["user"]]
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "clientCertificateData": base64.b64decode(user["client-certificate-data"]).decode(),
            "clientKeyData": base64.b64decode(user["client-key-data"]).decode(),
        },
    }
    plugin_dir = cli.tmp / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "credential.json").write_text(json.dumps(credential))
    script = plugin_dir / "admin-credential"
    script.write_text(
        "#!/bin/sh\n"
        f'echo run >> "{plugin_dir}/runs"\n'
        f'printf %s "$KUBERNETES_EXEC_INFO" > "{plugin_dir}/exec-info.json"\n'
        f'cat "{plugin_dir}/credential.json"\n'
    )
    script.chmod(0o755)
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [
            {
                "name": "exec-admin",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "./plugin/admin-credential",  # relative to the kubeconfig, as kubectl resolves it
                        "interactiveMode": "Never",
                        "provideClusterInfo": True,
                    }
                },
            }
        ],
        "contexts": [
            {"name": "exec", "context": {"cluster": "cluster", "user": "exec-admin", "namespace": world.namespace}}
        ],
        "current-context": "exec",
    }
    (cli.tmp / "exec.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    cli.other_kubeconfigs["exec"] = cli.tmp / "exec.kubeconfig"
    cli.exec_cluster = cluster


@when(step('I run "{command:q}" with that kubeconfig'))
def run_with_exec(cli: Cli, command: str) -> None:
    plugin_runs = cli.tmp / "plugin" / "runs"
    plugin_runs.unlink(missing_ok=True)
    cli.run(command, kubeconfig=str(cli.other_kubeconfigs["exec"]))


@then("the plugin ran once, was told the cluster's server and CA and that it is not interactive")
def plugin_ran(cli: Cli) -> None:
    assert (cli.tmp / "plugin" / "runs").read_text().splitlines() == ["run"]
    info = json.loads((cli.tmp / "plugin" / "exec-info.json").read_text())
    cluster = cli.exec_cluster
    assert info["apiVersion"] == "client.authentication.k8s.io/v1" and info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == cluster["server"].rstrip("/")
    assert info["spec"]["cluster"]["certificate-authority-data"] == cluster["certificate-authority-data"]


# ---- gangs -----------------------------------------------------------------------------------------------------


@when(step('the pods "{names:q}" naming the GpuClaim "{claim:q}" with gang size {size:d} are created'))
def gang_members(world: World, names: str, claim: str, size: int) -> None:
    for name in names.split(","):
        world.api.create(paths.pods(world.namespace), gang_member_body(name, claim, size))


@then(step('"{command:q}" shows the gang "{gang:q}" {status} with the message "{message:q}"'))
def gang_document(cli: Cli, command: str, gang: str, status: str, message: str) -> None:
    def check(result: Result) -> None:
        assert result.code == 0, str(result)
        doc = json.loads(result.out)
        assert doc["namespace"] is None, doc  # -A
        rows = [r for r in doc["gangs"] if (r["namespace"], r["gang"]) == (cli.world.namespace, gang)]
        assert len(rows) == 1, doc
        assert (rows[0]["status"], rows[0]["why"]) == (status, message), rows[0]

    cli.until(command, check)


# ---- kubectl's plugin mechanism ----------------------------------------------------------------------------------


def _kubectl() -> str:
    """The kubectl the toolchain built (hack/toolchain.py, beside the control plane's binaries), or GPU_TEST_KUBECTL."""
    if os.environ.get("GPU_TEST_KUBECTL"):
        return os.environ["GPU_TEST_KUBECTL"]
    built = toolchain.bindir() / "kubectl"
    if not built.exists():  # `make scenarios` builds it (SCENARIO_TOOLS): a missing one is a failure, not a skip
        pytest.fail(f"no kubectl built in {built.parent}: `python3 hack/toolchain.py build kubectl` makes one")
    return str(built)


@when(parsers.parse('I run kubectl "{args}" with the console scripts on its PATH'))
def run_kubectl(cli: Cli, args: str) -> None:
    cli.run(args, program=_kubectl())


@then("it prints the server's own version as serverVersion")
def server_version(cli: Cli) -> None:
    assert cli.last is not None and cli.last.code == 0, str(cli.last)
    doc = json.loads(cli.last.out)
    assert doc["serverVersion"]["gitVersion"] == cli.world.api.get("/version")["gitVersion"]
    assert doc["clientVersion"]["version"]
