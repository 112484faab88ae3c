"""The project's tests: `unit/` by topic (pure modules on plain data, the repository's own files), `integration/`
(the programs against real processes). ROOT is the repository's root, for tests that read its files."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
