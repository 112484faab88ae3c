"""What every `kubectl gpu` command gets: its arguments, where to print, colour, the time, and the cluster's settings
(loaded only by the commands that talk to a cluster)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from typing import TextIO

from gpu_scheduling.cli.api import CliError
from gpu_scheduling.cli.output import Painter, no_resources
from gpu_scheduling.kube import config
from gpu_scheduling.kube.config import ClusterConfig

#: The namespace of a context that names none, as kubectl.
DEFAULT_NAMESPACE = "default"


@dataclasses.dataclass
class Ctx:
    args: argparse.Namespace
    out: TextIO
    err: TextIO
    paint: Painter
    now: datetime.datetime = dataclasses.field(default_factory=lambda: datetime.datetime.now(datetime.UTC))
    _cfg: ClusterConfig | None = None

    def config(self) -> ClusterConfig:
        if self._cfg is None:
            try:
                self._cfg = config.load(self.args.kubeconfig, self.args.context)
            except config.ConfigError as exc:
                raise CliError(str(exc)) from None
            except (OSError, ValueError) as exc:  # an unreadable CA or certificate file, bad base64
                raise CliError(f"cannot load the kubeconfig's TLS settings: {exc}") from None
        return self._cfg

    @property
    def output(self) -> str:
        return str(self.args.output or "")

    @property
    def wide(self) -> bool:
        return self.output == "wide"

    @property
    def all_namespaces(self) -> bool:
        return bool(self.args.all_namespaces)

    @property
    def namespace(self) -> str:
        """-n, else the context's namespace, else "default"."""
        return str(self.args.namespace or self.config().namespace or DEFAULT_NAMESPACE)

    @property
    def scope(self) -> str | None:
        """The namespace to list in: None with -A."""
        return None if self.all_namespaces else self.namespace

    @property
    def scheduler_name(self) -> str:
        return str(self.args.scheduler_name)

    def print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def lines(self, lines: list[str]) -> None:
        for line in lines:
            self.print(line)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=self.err, flush=True)

    def nothing_found(self, namespaced: bool) -> None:
        print(no_resources(self.scope if namespaced else None), file=self.err, flush=True)
