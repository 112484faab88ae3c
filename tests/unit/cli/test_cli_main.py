"""kubectl-gpu's command line: the commands it lists, kubectl's global flags before or after the command, the -o
formats each command prints, exit statuses, and the commands that need no cluster (generate-template, version
--client)."""

import asyncio
import io

import pytest

from gpu_scheduling.cli import api, commands, documents, main, output
from gpu_scheduling.cli.context import Ctx


def run(*argv: str, **kw) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main.run(list(argv), stdout=out, stderr=err, environ=kw.get("environ", {}))
    return code, out.getvalue(), err.getvalue()


COMMANDS = [
    "status",
    "nodes",
    "claims",
    "gangs",
    "submit",
    "strategy",
    "watch",
    "health",
    "generate-template",
    "version",
]


def test_help_lists_every_command_with_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main.run(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: kubectl gpu ")
    for command in COMMANDS:
        assert f"\n    {command}" in text, command
    assert "claims (workloads)" in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        main.run([command, "--help"])
    assert info.value.code == 0
    assert "--kubeconfig" in capsys.readouterr().out


def test_global_flags_go_before_or_after_the_command():
    parser = main.parser()
    before = parser.parse_args(["-n", "ml", "--context", "c", "-o", "wide", "claims"])
    after = parser.parse_args(["claims", "-n", "ml", "--context", "c", "-o", "wide"])
    for args in (before, after):
        assert (args.namespace, args.context, args.output, args.command) == ("ml", "c", "wide", "claims")
    defaults = parser.parse_args(["nodes"])
    assert (defaults.namespace, defaults.all_namespaces, defaults.output, defaults.scheduler_name) == (
        None,
        False,
        None,
        "gpu-scheduler",
    )
    assert parser.parse_args(["workloads", "-A"]).all_namespaces


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["health", "-o", "name"], "kubectl gpu health does not print -o name (it prints: json, yaml)"),
        (["watch", "-o", "yaml"], "kubectl gpu watch does not print -o yaml (it prints: json)"),
        (["generate-template", "-", "-o", "json"], "kubectl gpu generate-template takes no -o"),
    ],
)
def test_a_format_a_command_does_not_print_is_a_usage_error(argv, shown):
    code, out, err = run(*argv)
    assert (code, out) == (2, "")
    assert err == f"error: {shown}\n"


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main.run(["nodes", "-o", "table"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main.run(["strategy", "best-fit", "--timeout", "soon"])
    assert info.value.code == 2
    assert "--timeout: expected seconds from 0.001 to 604800, got 'soon'" in capsys.readouterr().err


def test_timeouts_take_seconds_or_units():
    parser = main.parser()
    assert parser.parse_args(["strategy", "x", "--timeout", "45"]).timeout == 45
    assert parser.parse_args(["strategy", "x", "--timeout", "2m"]).timeout == 120
    assert parser.parse_args(["watch", "--timeout", "1.5s"]).timeout == 1.5
    assert parser.parse_args(["watch", "--timeout", "1h"]).timeout == 3600
    assert parser.parse_args(["watch"]).timeout is None
    assert parser.parse_args(["strategy"]).wait is True and parser.parse_args(["strategy", "--no-wait"]).wait is False


def test_generate_template_writes_a_file_once(tmp_path):
    target = tmp_path / "train.yaml"
    code, out, err = run("generate-template", str(target), "--name", "train", "--gpus", "2", "--strategy", "best_fit")
    assert (code, err) == (0, "")
    assert out == f"wrote {target}: GpuClaim train and Pod train (kubectl gpu submit {target})\n"
    claim, pod = documents.check(documents.load(target.read_text()), "default")
    assert claim.body["spec"]["strategy"] == "BestFit" and claim.body["spec"]["devices"]["count"] == 2
    assert pod.claim == "train"
    target.write_text("mine")
    code, out, err = run("generate-template", str(target))
    assert (code, out, err) == (1, "", f"error: {target} exists: pass --force to overwrite it\n")
    assert target.read_text() == "mine"
    assert run("generate-template", str(target), "--force", "--name", "other")[0] == 0
    assert "name: other" in target.read_text()


def test_generate_template_to_stdout_and_its_refusals():
    code, out, err = run("generate-template", "-", "--policy", "spread")
    assert code == 0 and "policy: spread" in out and err == ""
    code, out, err = run("generate-template", "-", "--strategy", "priority")
    assert (code, out) == (2, "") and "is a queue order, not a node strategy" in err
    code, out, err = run("generate-template", "-", "--gpus", "0")
    assert (code, err) == (2, "error: --gpus must be at least 1, got 0\n")


def test_version_without_a_cluster():
    code, out, err = run("version", "--client")
    assert code == 0 and out.startswith("Client Version: kubectl-gpu 0.1.0 (Python ") and err == ""
    code, out, _ = run("version", "--client", "-o", "json")
    assert code == 0 and '"clientVersion": {' in out and "serverVersion" not in out


def test_a_missing_kubeconfig_is_an_error_not_a_traceback(tmp_path):
    code, out, err = run("claims", "--kubeconfig", str(tmp_path / "none"))
    assert (code, out) == (1, "")
    assert err.startswith(f"error: cannot read kubeconfig {tmp_path / 'none'}")


def test_an_unreachable_server_is_named(tmp_path):
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("""clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    code, out, err = run("nodes", "--kubeconfig", str(kubeconfig))
    assert (code, out) == (1, "")
    assert err.startswith("error: cannot reach the API server http://127.0.0.1:9: ")


def test_submit_refusals_name_each_document_before_any_request(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\nkind: Pod\napiVersion: v1\nmetadata: {}\n")
    # No cluster behind this kubeconfig: the documents are refused before any request is made.
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("""clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
contexts: [{name: x, context: {cluster: c, namespace: ml}}]
current-context: x
""")
    code, out, err = run("submit", str(bad), "--kubeconfig", str(kubeconfig))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: document 1: kind Service is not accepted: submit takes GpuClaim and Pod documents",
        "error: document 2 (Pod): metadata.name is missing",
    ]
    code, _, err = run("submit", str(tmp_path / "absent.yaml"), "--kubeconfig", str(kubeconfig))
    assert code == 1 and err.startswith(f"error: cannot read {tmp_path / 'absent.yaml'}")


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class CannedApi:
    """The one request `kubectl gpu claims` makes, answered from memory."""

    def __init__(self, claims: list[dict]) -> None:
        self.claims = claims

    async def list(self, res, namespace=None, **params):
        assert res is api.GPU_CLAIMS and namespace == "ml"
        return self.claims


CLAIMS = [
    {
        "metadata": {"name": "train", "namespace": "ml", "creationTimestamp": "2024-05-01T11:00:00Z"},
        "spec": {"devices": {"count": 1}},
        "status": {"phase": "Bound", "nodeName": "node1", "gpuIds": [3], "strategy": "BestFit"},
    },
    {
        "metadata": {"name": "wait", "namespace": "ml", "creationTimestamp": "2024-05-01T11:00:00Z"},
        "spec": {"devices": {"count": 8}},
        "status": {"phase": "Failed"},
    },
]


def claims_output(tty: bool, environ: dict[str, str]) -> str:
    out = Stream(tty)
    args = main.parser().parse_args(["claims", "-n", "ml"])
    ctx = Ctx(args, out, io.StringIO(), output.Painter(output.colour_wanted(out, environ)))
    assert asyncio.run(commands.claims(CannedApi(CLAIMS), ctx)) == 0  # type: ignore[arg-type]
    return out.getvalue()


def test_phases_are_coloured_on_a_terminal_only_and_never_with_no_color():
    coloured = claims_output(True, {})
    assert "\x1b[32mBound\x1b[0m" in coloured and "\x1b[31mFailed\x1b[0m" in coloured
    plain = claims_output(False, {})
    assert "\x1b[" not in plain and output.strip_ansi(coloured) == plain
    assert claims_output(True, {"NO_COLOR": "1"}) == plain
    assert plain.splitlines()[0].split() == ["NAME", "PHASE", "NODE", "GPUS", "STRATEGY", "AGE"]
