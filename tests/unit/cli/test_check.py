"""The check service's report, and that the real program prints it unbuffered and stops on SIGTERM."""

import signal
import subprocess
import sys
import time

from gpu_scheduling import check


def test_report_with_values():
    assert check.report({"NODE_NAME": "node3", "CUDA_VISIBLE_DEVICES": "0,1,2"}) == (
        "Node Name: node3\nCUDA_VISIBLE_DEVICES: 0,1,2\n---\n"
    )


def test_report_says_when_unset():
    text = check.report({})
    assert "Node Name: <unset>" in text and "CUDA_VISIBLE_DEVICES: <unset> (the gpu webhook did not inject it)" in text


def test_program_loops_and_exits_on_sigterm():
    env = {"NODE_NAME": "node4", "CUDA_VISIBLE_DEVICES": "3", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_scheduling.check", "--interval", "0.1"], stdout=subprocess.PIPE, text=True, env=env
    )
    lines = [proc.stdout.readline() for _ in range(6)]
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert proc.wait(timeout=5) == 0
    assert time.monotonic() - started < 2
    assert lines == ["Node Name: node4\n", "CUDA_VISIBLE_DEVICES: 3\n", "---\n"] * 2
