"""What the long-running programs share around their own work: the types of their flags (one rule per kind of
value, one wording of the error argparse prints), the TLS context of a server, and the run loop (SIGTERM and SIGINT
ask the work to stop; a bad kubeconfig or a port in use ends the program with one line instead of a traceback).

Each program's `main.py` reads its flags with these and hands its work to :func:`run`; nothing here knows what the
work is. No HTTP library is imported here.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
from collections.abc import Awaitable, Callable, Iterable

from gpu_scheduling.kube.config import ConfigError

# ---- flag types --------------------------------------------------------------------------------------------------


_UNITS = {"s": 1, "m": 60, "h": 3600}


def seconds(low: float = 0.0, high: float = 3600.0) -> Callable[[str], float]:
    """The argparse type of a duration: seconds written `15` or, as kube-scheduler's and kubectl's flags, with a
    unit: `15s`, `2m`, `1h`; from `low` to `high` (both included; NaN and infinity are refused)."""

    def parse(text: str) -> float:
        scale = _UNITS.get(text[-1:], 1)
        try:
            value = float(text[:-1] if text[-1:] in _UNITS else text) * scale
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # NaN too
            raise argparse.ArgumentTypeError(f"expected seconds from {low:g} to {high:g}, got {text!r}")
        return value

    return parse


def integer(low: int, high: int) -> Callable[[str], int]:
    """The argparse type of a count from `low` to `high` (both included), plain ASCII digits."""

    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit() and len(text) <= 12 and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer {low}..{high}")
        return int(text)

    return parse


def number(low: float, high: float) -> Callable[[str], float]:
    """The argparse type of a rate from `low` to `high` (both included): a plain decimal such as 50 or 2.5."""

    def parse(text: str) -> float:
        body = text.replace(".", "", 1)
        if not (text.isascii() and body.isdigit() and len(text) <= 12 and low <= float(text) <= high):
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number {low:g}..{high:g}")
        return float(text)

    return parse


def port(text: str) -> int:
    """The argparse type of a port to listen on: 1..65535, plain ASCII digits (checked where the message names the
    flag, rather than when the server binds)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port 1..65535")
    return int(text)


def optional_port(text: str) -> int:
    """As :func:`port`, and 0 for "serve nothing" (an optional health server)."""
    if text == "0":
        return 0
    try:
        return port(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port 1..65535, or 0 for none") from None


# ---- TLS ---------------------------------------------------------------------------------------------------------

# TLS 1.2 with ECDHE key exchange and AEAD ciphers only (no CBC, no RSA key exchange); TLS 1.3 suites are all AEAD.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def server_tls(cert_file: str, key_file: str, alpn: Iterable[str] = ()) -> ssl.SSLContext:
    """The TLS context of a server: TLS 1.2 or later, forward-secret AEAD ciphers, no compression or renegotiation,
    the server's cipher order; `alpn` the protocols offered, in order of preference. An unreadable or mismatched
    pair raises OSError or ssl.SSLError here, before anything listens."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    if protocols := list(alpn):
        ctx.set_alpn_protocols(protocols)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


# ---- the run loop ------------------------------------------------------------------------------------------------


def stop_on_signals() -> asyncio.Event:
    """An event the running loop sets on SIGTERM (the kubelet stopping the pod) or SIGINT (Ctrl-C)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def until_stopped(stop: asyncio.Event, tasks: Iterable[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    """Wait until `stop` is set or one of `tasks` ends (its work done, or failed); the tasks that ended. The caller
    then stops the rest in its own order and calls :func:`raise_failure` with these."""
    stopper = asyncio.create_task(stop.wait(), name="stop")
    try:
        done, _ = await asyncio.wait({*tasks, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    done.discard(stopper)
    return done


def raise_failure(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Raise the error a task of `tasks` ended with (a crash is not a stop), if any."""
    for task in tasks:
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error


def run(
    prog: str,
    work: Callable[[asyncio.Event], Awaitable[None]],
    *,
    start_errors: tuple[type[BaseException], ...] = (),
) -> None:
    """Run `work(stop)` in a new event loop until it returns; `stop` is set by SIGTERM or SIGINT. A kubeconfig that
    cannot be used ends the program with `prog: <why>`, one of `start_errors` (a port in use, an unreadable
    certificate) with `prog: cannot start: <why>`, both with exit status 1; any other error propagates."""

    async def main() -> None:
        await work(stop_on_signals())

    try:
        asyncio.run(main())
    except ConfigError as exc:
        raise SystemExit(f"{prog}: {exc}") from None
    except start_errors as exc:
        raise SystemExit(f"{prog}: cannot start: {exc}") from None
