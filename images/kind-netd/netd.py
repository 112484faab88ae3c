#!/usr/bin/env python3
"""testbed-netd: the pod network of the test-bed's offline kind nodes.

kind's own CNI, kindnetd, cannot be built here (its source is not on the Go module proxy), so the offline node
image ships this instead. On its node it:
  * writes the CNI config: `ptp` veths with `host-local` addresses from the node's spec.podCIDR, plus `portmap`;
  * routes every other node's podCIDR via that node's InternalIP (all kind nodes share one Docker network).
It polls the node list every few seconds; it touches nothing but /etc/cni/net.d and the node's routing table.
Standard library only, so the image needs just python3 and iproute2.
"""

import json
import os
import pathlib
import ssl
import subprocess
import sys
import time
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
CNI_FILE = os.environ.get("CNI_CONFIG", "/etc/cni/net.d/10-testbed.conflist")
INTERVAL = float(os.environ.get("INTERVAL", "5"))


def api_base() -> str:
    # kind puts the control plane's address here, so the network comes up before kube-proxy does.
    endpoint = os.environ.get("CONTROL_PLANE_ENDPOINT")
    if endpoint:
        return f"https://{endpoint}"
    return f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"


def get(path: str) -> dict:
    ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
    token = pathlib.Path(f"{SA}/token").read_text().strip()
    req = urllib.request.Request(api_base() + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return json.load(resp)


def internal_ip(node: dict) -> str | None:
    for addr in node.get("status", {}).get("addresses", []):
        if addr.get("type") == "InternalIP" and ":" not in addr.get("address", ""):
            return addr["address"]
    return None


def write_cni_config(pod_cidr: str) -> None:
    config = {
        "cniVersion": "0.3.1",
        "name": "testbed",
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": False,
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "dataDir": "/run/cni-ipam-state",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    text = json.dumps(config, indent=2) + "\n"
    target = pathlib.Path(CNI_FILE)
    try:
        if target.read_text() == text:
            return
    except OSError:
        pass
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(target)
    print(f"wrote {CNI_FILE} for podCIDR {pod_cidr}", flush=True)


def sync(me: str) -> None:
    routes: dict[str, str] = {}
    for node in get("/api/v1/nodes")["items"]:
        name, cidr, ip = node["metadata"]["name"], node.get("spec", {}).get("podCIDR"), internal_ip(node)
        if not cidr:
            continue
        if name == me:
            write_cni_config(cidr)
        elif ip:
            routes[cidr] = ip
    for cidr, ip in routes.items():
        subprocess.run(["ip", "route", "replace", cidr, "via", ip], check=True)


def main() -> None:
    me = os.environ["NODE_NAME"]
    print(f"testbed-netd on {me}", flush=True)
    while True:
        try:
            sync(me)
        except Exception as exc:  # noqa: BLE001 - a daemon loop: log whatever failed (the apiserver restarting, a route) and try again
            print(f"sync failed: {exc}", file=sys.stderr, flush=True)
        time.sleep(INTERVAL)


if __name__ == "__main__":
    main()
