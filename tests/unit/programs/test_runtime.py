"""The programs' shared runtime: one rule per kind of flag (and every program's flags use it), the TLS server context,
and the run loop (SIGTERM stops the work; a crash of the work is not a stop; start-up errors are one line)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl

import pytest

from gpu_scheduling import runtime
from gpu_scheduling.kube.config import ConfigError
from harness import pki

# ---- flag types --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0.0), ("15", 15.0), ("15s", 15.0), ("0.5s", 0.5), ("3600", 3600.0), ("15m", 900.0), ("1h", 3600.0)],
)
def test_seconds_with_or_without_unit(text, value):
    assert runtime.seconds(0, 3600)(text) == value


@pytest.mark.parametrize("text", ["-1", "3601", "nan", "inf", "soon", "", "61m", "2h", "1e9", "m", "5d"])
def test_seconds_out_of_range_or_not_a_number(text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^expected seconds from 0 to 3600, got {text!r}$"):
        runtime.seconds(0, 3600)(text)


@pytest.mark.parametrize(("text", "ok"), [("1", True), ("65535", True), ("0", False), ("65536", False)])
def test_port_bounds(text, ok):
    if ok:
        assert runtime.port(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"^{text!r}: expected a port 1..65535$"):
            runtime.port(text)


@pytest.mark.parametrize("text", ["-1", "+80", " 80", "80 ", "\uff18\uff10", "http", "", "99999999999999999999999"])
def test_port_is_plain_ascii_digits(text):
    with pytest.raises(argparse.ArgumentTypeError):
        runtime.port(text)
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected a port 1\.\.65535, or 0 for none$"):
        runtime.optional_port(text)


def test_optional_port_takes_zero_for_none():
    assert (runtime.optional_port("0"), runtime.optional_port("8080")) == (0, 8080)


@pytest.mark.parametrize(("text", "ok"), [("1", True), ("10", True), ("0", False), ("11", False), ("x", False)])
def test_integer_bounds(text, ok):
    if ok:
        assert runtime.integer(1, 10)(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"^{text!r}: expected an integer 1..10$"):
            runtime.integer(1, 10)(text)


def _parse(prog: str, argv: list[str]) -> None:
    if prog == "gpu-webhook":
        from gpu_scheduling.webhook import main as webhook

        webhook.parse_args(["--tls-cert-file=c", "--tls-private-key-file=k", *argv])
    elif prog == "gpu-scheduler":
        from gpu_scheduling.scheduler import main as scheduler

        scheduler.parse_args(argv)
    elif prog == "gpu-board":
        from gpu_scheduling.board import main as board

        board.parse_args(argv)
    elif prog == "gpu-inventory-agent":
        from gpu_scheduling.agent import main as agent

        agent.main([*argv, "--print"])
    elif prog == "gpu-device-plugin":
        from gpu_scheduling.agent import deviceplugin

        deviceplugin.parse_args(argv)
    else:
        from gpu_scheduling import check

        check.main(argv)


@pytest.mark.parametrize(
    ("prog", "flag", "value", "message"),
    [
        ("gpu-webhook", "--port", "0", "'0': expected a port 1..65535"),
        ("gpu-webhook", "--drain-seconds", "nan", "expected seconds from 0 to 3600, got 'nan'"),
        ("gpu-webhook", "--max-connections", "-5", "'-5': expected an integer 1..100000"),
        ("gpu-scheduler", "--health-port", "70000", "'70000': expected a port 1..65535"),
        ("gpu-scheduler", "--leader-elect-lease-duration", "soon", "expected seconds from 0 to 3600, got 'soon'"),
        ("gpu-board", "--port", "http", "'http': expected a port 1..65535"),
        ("gpu-board", "--coalesce", "0", "expected seconds from 0.01 to 60, got '0'"),
        ("gpu-inventory-agent", "--health-port", "-1", "'-1': expected a port 1..65535, or 0 for none"),
        ("gpu-inventory-agent", "--interval", "0", "expected seconds from 0.1 to 3600, got '0'"),
        ("gpu-device-plugin", "--slots", "0", "'0': expected an integer 1..1024"),
        ("gpu-device-plugin", "--interval", "-5", "expected seconds from 0.1 to 3600, got '-5'"),
        ("gpu-device-plugin", "--health-port", "65536", "'65536': expected a port 1..65535, or 0 for none"),
        ("gpu-scheduler-check", "--interval", "-1", "expected seconds from 0.1 to 3600, got '-1'"),
    ],
)
def test_every_program_reads_its_flags_with_the_shared_types(prog, flag, value, message, capsys):
    with pytest.raises(SystemExit) as exited:
        _parse(prog, [f"{flag}={value}"])
    assert exited.value.code == 2
    assert f"error: argument {flag}: {message}" in capsys.readouterr().err


# ---- TLS ---------------------------------------------------------------------------------------------------------


def test_server_tls_is_tls12_or_later_with_forward_secret_aead_ciphers(tmp_path):
    ca = pki.CA(tmp_path, "test")
    pair = ca.issue("serving", "a-server", server=True, dns=("localhost",), ips=("127.0.0.1",))
    ctx = runtime.server_tls(str(pair.cert), str(pair.key), alpn=["h2", "http/1.1"])
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.options & ssl.OP_NO_COMPRESSION and ctx.options & ssl.OP_NO_RENEGOTIATION
    tls12 = [c for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(c["kea"] == "kx-ecdhe" and c["aead"] for c in tls12), tls12
    with pytest.raises(ssl.SSLError):  # a key that is not the certificate's
        runtime.server_tls(str(pair.cert), str(ca.issue("other", "b", server=True).key))


# ---- the run loop ------------------------------------------------------------------------------------------------


def test_sigterm_stops_the_work():
    seen: list[str] = []

    async def work(stop: asyncio.Event) -> None:
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 5)
        seen.append("stopped")

    runtime.run("prog", work)
    assert seen == ["stopped"]


def test_until_stopped_returns_what_ended_and_a_crash_is_raised():
    async def crash() -> None:
        raise RuntimeError("a bug")

    async def main() -> None:
        stop = asyncio.Event()
        forever = asyncio.create_task(asyncio.Event().wait())
        crashed = asyncio.create_task(crash())
        done = await runtime.until_stopped(stop, {forever, crashed})
        assert done == {crashed}
        with pytest.raises(RuntimeError, match="a bug"):
            runtime.raise_failure(done)
        stop.set()
        assert await runtime.until_stopped(stop, {forever}) == set()  # a stop: nothing ended, nothing to raise
        forever.cancel()
        await asyncio.wait({forever})
        runtime.raise_failure({forever})  # cancelled is not a failure

    asyncio.run(main())


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (ConfigError("no kubeconfig here"), "prog: no kubeconfig here"),
        (OSError(98, "Address already in use"), "prog: cannot start: [Errno 98] Address already in use"),
    ],
)
def test_start_up_errors_are_one_line(error, message):
    async def work(_: asyncio.Event) -> None:
        raise error

    with pytest.raises(SystemExit) as exited:
        runtime.run("prog", work, start_errors=(OSError,))
    assert exited.value.code == message


def test_other_errors_propagate():
    async def work(_: asyncio.Event) -> None:
        raise OSError("not a start-up error of this program")

    with pytest.raises(OSError, match="not a start-up error"):
        runtime.run("prog", work)
