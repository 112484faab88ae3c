"""Loaded by the `kubectl gpu watch` that features/cli runs in the background (PYTHONPATH names this folder): on
SIGUSR1 it writes every thread's stack and every asyncio task's to stderr, so that a watch that does not exit after
SIGINT says where it hangs (py-spy cannot read this interpreter). Test-only: the program itself has no such hook."""

import asyncio
import faulthandler
import signal
import sys


def _dump(signum: int, frame: object) -> None:
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        print("stacks: no event loop runs", file=sys.stderr, flush=True)
        return
    for task in asyncio.all_tasks(loop):
        print(f"stacks: {task!r}", file=sys.stderr)
        # A suspended task shows one frame; its await chain shows where it waits.
        awaited = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
            if frame is not None:
                print(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}", file=sys.stderr)
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    sys.stderr.flush()


signal.signal(signal.SIGUSR1, _dump)
