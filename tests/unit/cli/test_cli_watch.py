"""`kubectl gpu watch`: lines per change of state, the snapshot, and a relist after 410 Gone that reports what
changed while the watch was down (through the project's Informer, against a scripted client)."""

import asyncio
import datetime
import json

from gpu_scheduling import constants
from gpu_scheduling.cli import watch
from gpu_scheduling.cli.api import GPU_CLAIMS, GPU_NODE_STATUSES, PODS

CLOCK = datetime.datetime(2024, 5, 1, 12, 0, 1)
CLAIMS = watch.Source("gpuclaim", GPU_CLAIMS, watch.claim_summary, {})
PODS_SOURCE = watch.Source("pod", PODS, watch.pod_summary, {})
INVENTORIES = watch.Source("gpunodestatus", GPU_NODE_STATUSES, watch.inventory_summary, {})


def claim(name: str, rv: str, phase: str | None = None, allocated: str = "", message: str = "") -> dict:
    status = {k: v for k, v in {"phase": phase, "allocated": allocated, "message": message}.items() if v}
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "status": status}


def printer(lines: list[str], **kw) -> watch.Printer:
    return watch.Printer(lines.append, clock=lambda: CLOCK, **kw)


def test_lines_for_snapshot_changes_and_deletion():
    lines: list[str] = []
    p = printer(lines)
    p.event(CLAIMS, "ADDED", claim("train", "1", "Pending", message="waiting for\n 2 GPUs"), initial=True)
    p.event(CLAIMS, "MODIFIED", claim("train", "2", "Pending", message="waiting for 2 GPUs"))  # same summary
    p.event(CLAIMS, "MODIFIED", claim("train", "3", "Bound", allocated="node2:0,1"))
    p.event(CLAIMS, "ADDED", claim("new", "4"))
    p.event(CLAIMS, "DELETED", claim("train", "5", "Bound", allocated="node2:0,1"))
    assert lines == [
        "12:00:01  gpuclaim/ns/train  Pending  waiting for 2 GPUs",
        "12:00:01  gpuclaim/ns/train  Pending -> Bound  node2:0,1",
        "12:00:01  gpuclaim/ns/new  new -> <none>",
        "12:00:01  gpuclaim/ns/train  Bound -> deleted",
    ]


def test_no_snapshot_prints_only_later_changes_and_json_lines():
    lines: list[str] = []
    p = printer(lines, snapshot=False, fmt="json")
    p.event(CLAIMS, "ADDED", claim("train", "1", "Pending"), initial=True)
    p.event(CLAIMS, "MODIFIED", claim("train", "2", "Bound", allocated="node1:3"))
    assert [json.loads(line) for line in lines] == [
        {
            "time": "2024-05-01T12:00:01",
            "event": "modified",
            "kind": "GpuClaim",
            "namespace": "ns",
            "name": "train",
            "from": "Pending",
            "to": "Bound",
            "detail": "node1:3",
        }
    ]


def test_pod_and_inventory_summaries():
    pod = {
        "metadata": {"name": "t-0", "namespace": "ns", "annotations": {constants.CLAIM_ANNOTATION: "t"}},
        "spec": {},
        "status": {"phase": "Pending"},
    }
    assert watch.pod_summary(pod) == ("Pending", "claim/t")
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "message": "every node is busy"}]
    assert watch.pod_summary(pod) == ("Unschedulable", "every node is busy")
    pod["spec"]["nodeName"] = "node2"
    pod["metadata"]["uid"] = "u"
    pod["metadata"]["annotations"][constants.ALLOCATED_ANNOTATION] = "node2:0,1"
    pod["status"] = {"phase": "Running"}
    assert watch.pod_summary(pod) == ("Running", "node2:0,1")
    pod["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    assert watch.pod_summary(pod)[0] == "Terminating"
    inv = {"metadata": {"name": "node1"}, "status": {"total": 8, "free": 6, "unhealthy": 1}}
    assert watch.inventory_summary(inv) == ("free 6/8", "1 unhealthy")


class ScriptedClient:
    """list_pages and watch as kube.client.Client has them, answering from a script: each LIST returns the next
    list of objects; each WATCH yields the next list of events (a dict with code 410 as an ERROR event), then
    waits for ever once the script is over."""

    def __init__(self, lists: list[list[dict]], watches: list[list[dict]]) -> None:
        self.lists, self.watches = lists, watches
        self.list_calls = 0
        self.watch_params: list[dict] = []
        self.done = asyncio.Event()

    async def list_pages(self, path, page_size=500, **params):
        items = self.lists[min(self.list_calls, len(self.lists) - 1)]
        self.list_calls += 1
        yield {"metadata": {"resourceVersion": str(10 * self.list_calls)}, "items": items}

    async def watch(self, path, params, timeout_seconds=300):
        self.watch_params.append(dict(params))
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()
        for event in self.watches.pop(0):
            yield event


def test_watch_relists_after_410_gone_and_reports_what_changed_meanwhile():
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    client = ScriptedClient(
        lists=[
            [claim("train", "5", "Pending")],
            # What the relist finds: train bound, big new, small (added by the watch) deleted meanwhile.
            [claim("train", "30", "Bound", allocated="node2:0,1"), claim("big", "31", "Pending", message="busy")],
        ],
        watches=[
            [{"type": "ADDED", "object": claim("small", "11", "Bound", allocated="node1:0")}, gone],
        ],
    )
    lines: list[str] = []
    p = printer(lines)

    async def scenario() -> None:
        task = asyncio.create_task(watch.follow(client, p, [CLAIMS], "ns"))  # type: ignore[arg-type]
        await asyncio.wait_for(client.done.wait(), 10)
        task.cancel()

    asyncio.run(scenario())
    assert lines == [
        "12:00:01  gpuclaim/ns/train  Pending",
        "12:00:01  gpuclaim/ns/small  new -> Bound  node1:0",
        "12:00:01  gpuclaim/ns/small  Bound -> deleted",
        "12:00:01  gpuclaim/ns/train  Pending -> Bound  node2:0,1",
        "12:00:01  gpuclaim/ns/big  new -> Pending  busy",
    ]
    assert client.list_calls == 2
    # The first watch starts at the first list's resourceVersion, the second at the relist's.
    assert [w["resourceVersion"] for w in client.watch_params] == ["10", "20"]
