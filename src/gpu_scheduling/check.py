"""`gpu-scheduler-check`: print the node name and CUDA_VISIBLE_DEVICES forever, so a human or a test can read
from the logs where a pod landed and which GPUs it was given. Reads only its environment.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from gpu_scheduling import constants, logs, runtime

UNSET = "<unset>"


def report(env: dict[str, str]) -> str:
    node = env.get(constants.NODE_NAME_ENV)
    cuda = env.get(constants.CUDA_ENV)
    lines = [
        f"Node Name: {node if node is not None else UNSET + ' (set NODE_NAME from the downward API spec.nodeName)'}",
        f"{constants.CUDA_ENV}: {cuda if cuda is not None else UNSET + ' (the gpu webhook did not inject it)'}",
        "---",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="gpu-scheduler-check", description="Log NODE_NAME and CUDA_VISIBLE_DEVICES every --interval seconds."
    )
    p.add_argument(
        "--interval", type=runtime.seconds(0.1, 3600), default=5.0, help="seconds between reports (default 5)"
    )
    logs.add_arguments(p)  # the report goes to stdout as it is; only log records (none today) use these
    args = p.parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set():
        sys.stdout.write(report(dict(os.environ)))
        sys.stdout.flush()
        stop.wait(args.interval)


if __name__ == "__main__":
    main()
