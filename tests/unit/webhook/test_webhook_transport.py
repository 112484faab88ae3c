"""gpu-webhook's transport extends Hypercorn with explicit subclasses wired when a connection is accepted, never by
replacing Hypercorn's classes at import (their behaviour is tested against real connections in
tests/integration/test_webhook_drain.py and test_webhook_hostile.py)."""

from __future__ import annotations

import asyncio

import hypercorn.protocol
import hypercorn.protocol.h2
import hypercorn.protocol.h11
import pytest
from hypercorn.asyncio.task_group import TaskGroup
from hypercorn.events import Closed, Event, RawData
from hypercorn.typing import ConnectionState

from gpu_scheduling.webhook import app, main, transport


def test_importing_the_webhook_leaves_hypercorn_as_it_is():
    assert main.transport is transport  # imported above, with all the webhook's modules
    assert hypercorn.protocol.H2Protocol is hypercorn.protocol.h2.H2Protocol
    assert hypercorn.protocol.H11Protocol is hypercorn.protocol.h11.H11Protocol


@pytest.mark.parametrize(
    ("alpn", "first_bytes", "expected"),
    [
        ("h2", b"", transport._H2Protocol),
        ("http/1.1", b"", transport._H11Protocol),
        # HTTP/2's preface on a connection that did not negotiate h2: Hypercorn switches, to the project's class.
        ("http/1.1", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", transport._H2Protocol),
    ],
)
def test_each_connection_speaks_through_the_projects_protocols(alpn, first_bytes, expected):
    async def main_() -> object:
        sent: list[Event] = []

        async def send(event: Event) -> None:
            sent.append(event)

        config = transport.hypercorn_config(transport.Limits())
        async with TaskGroup(asyncio.get_running_loop()) as group:
            protocols = transport._Protocols(
                transport.wrap_app(app.WebhookApp(), config.wsgi_max_body_size, "asgi"),
                config,
                transport._Context(),
                group,
                ConnectionState({}),
                True,
                ("127.0.0.1", 1),
                ("127.0.0.1", 2),
                send,
                alpn,
            )
            await protocols.initiate()
            if first_bytes:
                await protocols.handle(RawData(first_bytes))
            chosen = protocols.protocol
            await protocols.handle(Closed())
            return chosen

    assert type(asyncio.run(main_())) is expected
