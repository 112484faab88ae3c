"""The scheduler's Events: one recorder, given to whoever says something about an object (a pod scheduled or not,
a policy applied). An Event is a courtesy: losing one must never disturb scheduling, so nothing here raises for the
API's sake. It must not write anything but Events."""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, TransportError

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)

TRANSIENT = (ApiError, TransportError, TimeoutError)
"""What a call to the API may fail with and be tried again (the scheduler's modules that write share it)."""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recorder:
    def __init__(self, client: Client, component: str, instance: str):
        self.client = client
        self.component = component  # the scheduler's name
        self.instance = instance  # this replica (its host name)

    async def pod(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        involved = {
            "apiVersion": constants.CORE_API_VERSION,
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        await self.post(involved, meta["namespace"], type_, reason, message)

    async def post(self, involved: dict[str, Any], namespace: str, type_: str, reason: str, message: str) -> None:
        stamp = now()
        event = {
            "apiVersion": constants.CORE_API_VERSION,
            "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.client.post(paths.events(namespace), event)
        except (ApiError, TransportError) as exc:
            # An event is a courtesy: losing one (the apiserver busy or going away) must not disturb scheduling.
            log.warning("could not record %s event for %s %s: %s", reason, involved["kind"], involved["name"], exc)
