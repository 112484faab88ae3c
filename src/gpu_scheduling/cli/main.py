"""Entry point of `kubectl-gpu` (placeholder until the CLI lands)."""

import sys


def main() -> None:
    sys.exit("kubectl-gpu: not built yet")
