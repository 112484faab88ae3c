"""requirements.yml says which Ansible collections the test-bed needs, and it must stay true: it names exactly the
collections the playbooks, roles and templates use (one the YAML uses but the file leaves out would be missing on a
machine that installs from it; one it names but nothing uses is a dependency for nothing), and the collections the
`ansible` package in the venv bundles, which are what every run actually uses, satisfy its version constraints.

The YAML is read at test time (site.yml, teardown.yml, playbooks/, roles/, hack/), so a new playbook or role is
checked too. A use is a fully qualified name `<namespace>.<collection>.<name>` as Ansible resolves it: a task's
module key, a lookup, query, filter or test in a Jinja expression (in the YAML and in the roles' templates), a role
given by name, or a play's `collections:` list. ansible.builtin is ansible-core's own, not a collection to install."""

import importlib.metadata
import json
import pathlib
import re
from collections.abc import Iterator

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests import ROOT

REQUIREMENTS = ROOT / "requirements.yml"
#: ansible-core's own plugins: always there, nothing to install.
CORE = "ansible.builtin"

_NAME = r"[a-z][a-z0-9_]*"
COLLECTION = re.compile(rf"{_NAME}\.{_NAME}")
FQCN = re.compile(rf"{_NAME}\.{_NAME}\.{_NAME}")
#: Plugins named inside Jinja: lookup('x.y.z'), query/q('x.y.z'), `| x.y.z` (a filter), `is [not] x.y.z` (a test).
JINJA_USES = re.compile(
    rf"""\b(?:lookup|query|q)\(\s*['"](?P<lookup>{FQCN.pattern})['"]"""
    rf"|\|\s*(?P<filter>{FQCN.pattern})\b"
    rf"|\bis\s+(?:not\s+)?(?P<test>{FQCN.pattern})\b"
)
#: Task keys that name a role rather than a module.
ROLE_ACTIONS = {f"{CORE}.{a}" for a in ("include_role", "import_role")} | {"include_role", "import_role"}


class _AnsibleLoader(yaml.SafeLoader):
    """YAML as Ansible reads it: its own tags (!unsafe, !vault) are kept as their plain value."""


_AnsibleLoader.add_multi_constructor("!", lambda loader, _suffix, node: loader.construct_scalar(node))


def ansible_files() -> tuple[list[pathlib.Path], list[pathlib.Path]]:
    """The test-bed's YAML (playbooks, tasks, handlers, defaults, vars, meta) and the roles' Jinja templates."""
    yaml_files = [ROOT / "site.yml", ROOT / "teardown.yml", *sorted((ROOT / "hack").glob("*.yml"))]
    for folder in ("playbooks", "roles"):
        yaml_files += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".yml", ".yaml"))
    templates = sorted((ROOT / "roles").rglob("*.j2"))
    return [p for p in yaml_files if p.is_file()], templates


def jinja_uses(text: str) -> Iterator[str]:
    for m in JINJA_USES.finditer(text):
        yield m.group("lookup") or m.group("filter") or m.group("test")


def uses_in(node: object, parent_key: str | None = None) -> Iterator[str]:
    """Every fully qualified plugin or role name in a YAML document, and `<ns>.<coll>` of a `collections:` list."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and FQCN.fullmatch(key):
                yield key  # a task's module (or an action given by its full name)
            if key in ROLE_ACTIONS and isinstance(value, dict) and FQCN.fullmatch(str(value.get("name", ""))):
                yield value["name"]  # a collection's role, included by name
            if key == "collections" and isinstance(value, list):
                yield from (f"{c}.*" for c in value if isinstance(c, str) and COLLECTION.fullmatch(c))
            yield from uses_in(value, key if isinstance(key, str) else None)
    elif isinstance(node, list):
        for item in node:
            if parent_key == "roles":  # a play's roles: `- x.y.role` or `- role: x.y.role`
                role = item.get("role", item.get("name")) if isinstance(item, dict) else item
                if isinstance(role, str) and FQCN.fullmatch(role):
                    yield role
            yield from uses_in(item, parent_key)
    elif isinstance(node, str):
        yield from jinja_uses(node)


def used_names() -> dict[str, set[str]]:
    """Each fully qualified name the test-bed uses -> the files that use it (relative to the repository)."""
    yaml_files, templates = ansible_files()
    found: dict[str, set[str]] = {}
    for path in yaml_files:
        for doc in yaml.load_all(path.read_text(), Loader=_AnsibleLoader):  # a SafeLoader
            for name in uses_in(doc):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    for path in templates:
        for name in jinja_uses(path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def collection_of(name: str) -> str:
    return ".".join(name.split(".")[:2])


def used_collections() -> dict[str, set[str]]:
    """Each collection outside ansible.builtin that the test-bed uses -> the files that use it."""
    found: dict[str, set[str]] = {}
    for name, files in used_names().items():
        if collection_of(name) != CORE:
            found.setdefault(collection_of(name), set()).update(files)
    return found


def requirements() -> dict[str, str]:
    """requirements.yml's collections: name -> version constraint ("*" when it gives none)."""
    data = yaml.safe_load(REQUIREMENTS.read_text())
    assert isinstance(data, dict) and set(data) == {"collections"}, "requirements.yml should hold only `collections`"
    listed: dict[str, str] = {}
    for entry in data["collections"]:
        name, version = (entry, "*") if isinstance(entry, str) else (entry["name"], str(entry.get("version", "*")))
        assert name not in listed, f"requirements.yml lists {name} twice"
        listed[name] = version
    return listed


def bundled_version(collection: str) -> Version:
    """The version of `collection` as the installed `ansible` package bundles it (its MANIFEST.json)."""
    namespace, name = collection.split(".")
    manifest = importlib.metadata.distribution("ansible").locate_file(
        f"ansible_collections/{namespace}/{name}/MANIFEST.json"
    )
    assert pathlib.Path(str(manifest)).is_file(), f"the installed `ansible` package bundles no {collection}"
    return Version(json.loads(pathlib.Path(str(manifest)).read_text())["collection_info"]["version"])


def satisfies(version: Version, constraint: str) -> bool:
    """Galaxy's version range (`*`, or comparisons joined by commas, as in `>=6.0.0,<7.0.0`) against a version."""
    return constraint.strip() == "*" or version in SpecifierSet(constraint.replace(" ", ""))


def test_the_scan_reads_task_keys_lookups_filters_and_templates():
    """The scanner itself: it finds the modules the tasks and playbooks name, a lookup, a filter and a test inside
    Jinja, a role given by name, a `collections:` list; and it does not take dotted data (hostnames, attribute
    paths) for a plugin."""
    names = used_names()
    assert "ansible.builtin.command" in names and "kubernetes.core.helm" in names
    assert any(f.startswith("roles/") and "/tasks/" in f for f in names["ansible.builtin.command"])
    assert any(f.startswith("playbooks/") for f in names["ansible.builtin.include_role"])
    assert "ansible.builtin.fileglob" in names  # query('ansible.builtin.fileglob', ...)
    assert "ansible.builtin.from_yaml_all" in names  # ... | ansible.builtin.from_yaml_all
    assert not {n for n in names if n.startswith(("registry.k8s.", "item.", "testbed_facts_images."))}
    doc = {
        "tasks": [
            {"name": "a", "x.y.mod": {"msg": "{{ lookup('p.q.look', 'k') | r.s.filt }}"}, "when": "v is t.u.test"},
            {"ansible.builtin.include_role": {"name": "c.d.role"}},
        ],
        "roles": ["e.f.role", {"role": "g.h.role"}],
        "collections": ["i.j"],
        "vars": {"host": "registry.k8s.io", "path": "{{ item.value.image }}"},
    }
    assert set(uses_in(doc)) == {
        "x.y.mod",
        "p.q.look",
        "r.s.filt",
        "t.u.test",
        "ansible.builtin.include_role",
        "c.d.role",
        "e.f.role",
        "g.h.role",
        "i.j.*",
    }


def test_requirements_name_exactly_the_collections_the_test_bed_uses():
    """A collection used but not listed fails with the files that use it; one listed but unused fails too."""
    used = used_collections()
    listed = set(requirements())
    missing = {c: sorted(files) for c, files in used.items() if c not in listed}
    assert not missing, f"requirements.yml leaves out collections the test-bed uses (and where): {missing}"
    unused = sorted(listed - set(used))
    assert not unused, f"requirements.yml lists collections that no playbook, role or template uses: {unused}"


def test_requirements_never_list_ansible_builtin():
    """ansible.builtin is ansible-core itself: Galaxy has no such collection to install."""
    assert CORE not in requirements(), f"requirements.yml lists {CORE}, which is ansible-core's own"


@pytest.mark.parametrize("collection", sorted(requirements()))
def test_the_bundled_collection_satisfies_the_constraint(collection):
    """What every run uses is the collection the `ansible` package bundles (nothing installs requirements.yml): its
    version must be in the range the file gives, or the file describes a test-bed that never ran."""
    constraint = requirements()[collection]
    assert constraint == "*" or SpecifierSet(constraint), f"{collection}: bad constraint {constraint!r}"
    version = bundled_version(collection)
    assert satisfies(version, constraint), f"the `ansible` package bundles {collection} {version}, not {constraint}"


def test_the_constraint_check_refuses_a_version_out_of_range():
    """satisfies() is what the test above relies on: it must refuse as well as accept."""
    assert satisfies(Version("6.2.0"), ">=6.0.0") and satisfies(Version("6.2.0"), ">=6.0.0,<7.0.0")
    assert not satisfies(Version("5.3.0"), ">=6.0.0") and not satisfies(Version("7.0.0"), ">=6.0.0, <7.0.0")
    assert satisfies(Version("1.0.0"), "*")


def test_nothing_on_the_required_path_installs_from_galaxy():
    """requirements.yml's header says nothing installs it: `make demo`, `make test` and CI use only the collections
    the `ansible` package bundles (Galaxy is unreachable on offline machines)."""
    yaml_files, templates = ansible_files()
    paths = [ROOT / "Makefile", *sorted((ROOT / ".ci").glob("*")), ROOT / ".gitlab-ci.yml", *yaml_files, *templates]
    paths += sorted(p for p in (ROOT / "hack").iterdir() if p.is_file())
    # What runs, not what is read: a README may say how to use requirements.yml by hand.
    runs = [p for p in paths if p.is_file() and p.suffix != ".md"]
    callers = [str(p.relative_to(ROOT)) for p in runs if "ansible-galaxy" in p.read_text()]
    assert not callers, f"these run ansible-galaxy on the required path: {callers}"
