#!/usr/bin/env python3
"""Pod start time on the KinD test-bed: create map pods one after another (each on its own GPU of one node), and
time each from its creation to Ready, as the client sees it. Run it with gpu-device-plugin deployed and again with
`agent.devicePlugin.enabled=false` to compare; the closing note of issue 22 quotes both.

Usage: .venv/bin/python hack/pod-start.py --kubeconfig KUBECONFIG --image CHECK_IMAGE [--pods 16] [--node node1]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from features.support import pod_body
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.sync import SyncClient
from harness.wait import wait_for


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--image", required=True, help="the check image the nodes pull")
    parser.add_argument("--pods", type=int, default=16)
    parser.add_argument("--node", default="node1")
    args = parser.parse_args()
    api = SyncClient(args.kubeconfig)
    ns = f"podstart-{uuid.uuid4().hex[:6]}"
    api.create(paths.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    seconds = []
    try:
        for n in range(args.pods):
            body = pod_body(f"start-{n}", gpu_map=f"0={args.node}:{n % 8}")
            body["metadata"]["labels"] = {"apps.kubernetes.io/pod-index": "0"}
            for c in [*body["spec"]["containers"], *body["spec"]["initContainers"]]:
                c["image"] = args.image
            started = time.monotonic()
            api.create(paths.pods(ns), body)

            def ready(name: str = f"start-{n}") -> bool | None:
                conditions = api.get(paths.pod(ns, name)).get("status", {}).get("conditions") or []
                return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) or None

            wait_for(f"start-{n} Ready", ready, timeout=120, interval=0.05)
            seconds.append(time.monotonic() - started)
            api.delete(paths.pod(ns, f"start-{n}"), gracePeriodSeconds="0")
    finally:
        api.delete(paths.namespace(ns))
    print(
        f"{len(seconds)} pods on {args.node}: creation to Ready p50 {statistics.median(seconds):.2f} s, "
        f"min {min(seconds):.2f} s, max {max(seconds):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
