"""Rendered Kubernetes manifests checked offline against the pinned Kubernetes OpenAPI v3 schemas.

The schemas are the apiserver's own published ones: ``api/openapi-spec/v3/*.json`` of the ``k8s.io/kubernetes`` Go
module at versions.yml's ``kubernetes_version`` (``kubernetes_oldest_version`` with $GPU_TESTBED_KUBERNETES=oldest),
read from the Go module cache (hack/toolchain.py's build of kube-apiserver puts the module there). A custom resource
is checked against the ``openAPIV3Schema`` of the served version of its CustomResourceDefinition, given by the
caller.

What is checked is what the apiserver's decoding and schema checks refuse with ``fieldValidation=Strict``: unknown
fields (an object whose schema lists ``properties`` is closed; in a CRD's structural schema every object is, as
pruning makes it, unless ``x-kubernetes-preserve-unknown-fields``), missing required fields, types, int32/int64
ranges, int-or-string, base64 ``format: byte``, RFC 3339 date-times and quantities; and for custom resources the
value keywords of a structural schema (enum, minimum, maxLength, pattern, anyOf, list-type set/map, ...). Not
checked: the apiserver's Go validation (name and label syntax, cross-field rules, the enums that the published
built-in schemas only describe in prose), CEL rules (``x-kubernetes-validations``), defaulting and admission.

It reads versions.yml and the module cache, nothing else: it downloads nothing and talks to no cluster.

Why not a library: `kubernetes-validate` 1.37.0 (jsonschema over the yannh/kubernetes-json-schema strict
schemas, the maintained Python choice) was run on the cases of tests/unit/testbed/test_openapi.py with the schemas of
v1.34.0 (2026-11): 18 of 22 verdicts agree; it accepts a port of 2**31 (int32 range), a memory limit of "1GB" (not
a quantity) and a caBundle that is not base64, which the apiserver refuses, and it cannot check a custom resource
against the CRD the chart ships (GpuClaim: schema not found), which half of test_openapi needs. It is a 22.5 MB
wheel (110 MB unpacked, every Kubernetes version's schemas) and took 152 ms for the nine valid documents against
2 ms here. A server-side dry run with `fieldValidation=Strict` is the real apiserver's answer, but the unit tier
has no apiserver (the control-plane scenarios apply the chart for real). kubeconform (Go) was not run: it reads
the same converted JSON schemas, so the int32, quantity and base64 gaps are to be expected there too.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import functools
import json
import os
import pathlib
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from hack import toolchain

KUBERNETES_MODULE = "k8s.io/kubernetes"
"""The Go module whose source tree holds the published OpenAPI documents, at versions.yml's kubernetes_version."""
SPEC_SUBDIR = pathlib.PurePosixPath("api/openapi-spec/v3")
"""Where the OpenAPI v3 documents are inside that module: one file per group-version."""

_REF_PREFIX = "#/components/schemas/"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
# The document of apiextensions.k8s.io/v1: its schemas hold ObjectMeta, the metadata of every custom resource.
_CRD_SPEC_FILE = "apis__apiextensions.k8s.io__v1_openapi.json"
# An apiVersion as the apiserver serves it: an optional DNS group, then a version (also keeps paths out of file names).
_API_VERSION_RE = re.compile(r"(?:[a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?v[0-9]+(?:(?:alpha|beta)[0-9]+)?")
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# resource.Quantity's grammar (k8s.io/apimachinery/pkg/api/resource): a decimal number, then a binary suffix, a
# decimal SI suffix or a decimal exponent ("1GB" or "1 Gi" is refused when the object is decoded).
_QUANTITY_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")
# metav1.Time's and the schema format's RFC 3339 (Go's time.RFC3339 layout; fractional seconds allowed).
_DATE_TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_IDENTIFIER_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
# Keys that only annotate a schema: a schema of these and `allOf: [{$ref}]` is just a reference to the named type.
_REFERENCE_KEYS = frozenset({"allOf", "description", "default", "nullable", "example", "externalDocs", "title"})

Path = tuple[str | int, ...]


class SchemasMissing(RuntimeError):
    """The pinned Kubernetes module is not in the Go module cache: a build step fills it, never a test run."""


def validate(docs: Iterable[dict[str, Any]], *, crds: Iterable[dict[str, Any]] = ()) -> list[str]:
    """Errors of each document against the pinned Kubernetes OpenAPI v3 schema of its apiVersion/kind (or the
    openAPIV3Schema of the matching version of a CustomResourceDefinition in `crds`); empty when all are valid.

    Each error reads ``<kind> <namespace>/<name>: <field path>: <what was expected>``. Every problem of every
    document is reported, not only the first. A ``None`` document (an empty YAML document, as a template that
    renders nothing gives) is skipped, as kubectl skips it. Raises SchemasMissing when the pinned module is not in
    the Go module cache, ValueError when a CRD of `crds` has no group, kind or versions.
    """
    custom = _custom_resource_schemas(crds)
    errors: list[str] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            errors.append(f"document #{index}: expected a mapping (a Kubernetes object), got {_describe(doc)}")
            continue
        label = _label(doc, index)
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        if not isinstance(api_version, str) or not api_version:
            errors.append(f"{label}: apiVersion: required field missing or not a string")
            continue
        if not isinstance(kind, str) or not kind:
            errors.append(f"{label}: kind: required field missing or not a string")
            continue
        group, _, version = api_version.rpartition("/")
        walk = _Walk(label, errors)
        crd_schema = custom.get((group, version, kind))
        if crd_schema is not None:
            # A custom resource is an embedded resource at its root: apiVersion, kind and ObjectMeta come implicitly.
            root = {**crd_schema, "x-kubernetes-embedded-resource": True}
            walk.check(doc, root, (), _Scope(_crd_spec().schemas, structural=True))
            continue
        spec = _load(_spec_file(api_version)) if _API_VERSION_RE.fullmatch(api_version) else None
        schema_name = spec.kinds.get((group, version, kind)) if spec is not None else None
        if spec is None or schema_name is None:
            errors.append(f"{label}: {_unknown_kind(api_version, kind, spec, custom)}")
            continue
        walk.check(doc, {"$ref": _REF_PREFIX + schema_name}, (), _Scope(spec.schemas, structural=False))
    return errors


@functools.cache
def spec_dir() -> pathlib.Path:
    """The folder of the pinned Kubernetes version's OpenAPI v3 documents in the Go module cache: the supported minor
    $GPU_TESTBED_KUBERNETES chooses (hack/toolchain.py kubernetes_choice; newest unless told)."""
    version = toolchain.at_kubernetes(toolchain.read_versions())["kubernetes_version"]
    module = f"{_escape_module_path(KUBERNETES_MODULE)}@{version}"
    folder = _gomodcache() / module / SPEC_SUBDIR
    if not folder.is_dir():
        raise SchemasMissing(
            f"no {SPEC_SUBDIR} of {KUBERNETES_MODULE}@{version} in the Go module cache ({folder}); fill it with "
            f"`GOFLAGS=-mod=mod go mod download -json {KUBERNETES_MODULE}@{version}` (a build step, as `make "
            "toolchain`'s build of kube-apiserver; the tests download nothing)"
        )
    return folder


@dataclasses.dataclass(frozen=True)
class _Spec:
    """One group-version's OpenAPI document: its schemas by name, and which schema is which apiVersion/kind."""

    schemas: Mapping[str, Any]
    kinds: Mapping[tuple[str, str, str], str]  # (group, version, kind) -> schema name


@functools.cache
def _load(file_name: str) -> _Spec | None:
    """The parsed document `file_name` of spec_dir(), None when the pinned version publishes no such file. Cached:
    the files are large (api/v1's is 2 MB), and only those of the group-versions asked about are read."""
    path = spec_dir() / file_name
    if not path.is_file():
        return None
    schemas: dict[str, Any] = json.loads(path.read_bytes()).get("components", {}).get("schemas", {})
    kinds: dict[tuple[str, str, str], str] = {}
    for name, schema in schemas.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            # DeleteOptions and WatchEvent name every group-version; the first schema naming a kind keeps it.
            kinds.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
    return _Spec(schemas, kinds)


def _crd_spec() -> _Spec:
    spec = _load(_CRD_SPEC_FILE)
    if spec is None:
        raise SchemasMissing(f"{spec_dir()} has no {_CRD_SPEC_FILE}, whose ObjectMeta custom resources need")
    return spec


def _spec_file(api_version: str) -> str:
    group, _, version = api_version.rpartition("/")
    return f"apis__{group}__{version}_openapi.json" if group else f"api__{version}_openapi.json"


def _gomodcache() -> pathlib.Path:
    """$GOMODCACHE, else what `go env GOMODCACHE` says, else Go's default ($GOPATH or ~/go, then pkg/mod)."""
    if value := os.environ.get("GOMODCACHE"):
        return pathlib.Path(value)
    if go := shutil.which("go"):
        # GOTOOLCHAIN=local: a go.mod asking for a newer Go must not make `go env` download a toolchain.
        env = {**os.environ, "GOTOOLCHAIN": "local"}
        out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, env=env, check=False).stdout
        if found := out.strip():
            return pathlib.Path(found)
    gopath = os.environ.get("GOPATH", "").split(os.pathsep)[0]
    return (pathlib.Path(gopath) if gopath else pathlib.Path.home() / "go") / "pkg" / "mod"


def _escape_module_path(module: str) -> str:
    # The module cache's case encoding: an upper-case letter is stored as "!" and the letter in lower case.
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)


def _custom_resource_schemas(crds: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(group, version, kind) -> openAPIV3Schema of every served version of the given CRDs."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        name = (crd.get("metadata") or {}).get("name", "?")
        group, kind = spec.get("group"), (spec.get("names") or {}).get("kind")
        if not group or not kind or not spec.get("versions"):
            raise ValueError(f"CustomResourceDefinition {name}: spec.group, spec.names.kind and spec.versions needed")
        for version in spec["versions"]:
            if not version.get("served", False):
                continue  # the apiserver has no endpoint for it: such an object is of an unknown kind
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is None:
                raise ValueError(f"CustomResourceDefinition {name}: version {version.get('name')} has no schema")
            found[(group, version["name"], kind)] = schema
    return found


def _unknown_kind(api_version: str, kind: str, spec: _Spec | None, custom: Mapping[tuple[str, str, str], Any]) -> str:
    version = toolchain.at_kubernetes(toolchain.read_versions())["kubernetes_version"]
    known = sorted({k for (_, _, k) in spec.kinds}) if spec is not None else []
    known += sorted({k for (g, v, k) in custom if api_version == (f"{g}/{v}" if g else v)})
    where = f"Kubernetes {version}'s OpenAPI v3 schemas"
    if spec is None and not known:
        return f"unknown apiVersion {api_version!r} (kind {kind}): not in {where} nor in the given CRDs"
    hint = difflib.get_close_matches(kind, known, n=1)
    did_you_mean = f"; did you mean {hint[0]}?" if hint else ""
    return f"unknown kind {kind!r} of apiVersion {api_version!r}: not in {where} nor in the given CRDs{did_you_mean}"


def _label(doc: Mapping[str, Any], index: int) -> str:
    """How a message names a document: `Deployment gpu-system/gpu-scheduler`, `ClusterRole gpu-scheduler`."""
    kind = doc.get("kind") if isinstance(doc.get("kind"), str) else "document"
    meta: Mapping[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    name = meta.get("name") or meta.get("generateName") or f"#{index}"
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


@dataclasses.dataclass(frozen=True)
class _Scope:
    """Where a schema comes from: the schemas its $refs name, and whether it is a CRD's structural schema."""

    schemas: Mapping[str, Any]
    structural: bool  # an object with neither properties nor additionalProperties is closed (CRD pruning)


@dataclasses.dataclass
class _Walk:
    """One document's walk: each problem becomes a line of `errors`, prefixed by the document's label."""

    label: str
    errors: list[str]

    def error(self, path: Path, message: str) -> None:
        self.errors.append(f"{self.label}: {_render(path)}: {message}")

    def check(self, value: Any, schema: Mapping[str, Any], path: Path, scope: _Scope, strict: bool = True) -> None:
        """Check `value` against `schema`. `strict` off (inside anyOf/oneOf/allOf/not of a CRD, which may only
        restrict values) leaves unknown fields to the enclosing schema."""
        schema, type_name, scope = _resolve(schema, scope)
        if value is None:
            if not schema.get("nullable"):
                expected = schema.get("type") or _short(type_name) or "a value"
                self.error(path, f"expected {expected}, got null")
            return
        if (schema.get("x-kubernetes-int-or-string") or schema.get("format") == "int-or-string") and not (
            isinstance(value, str) or _is_type(value, "integer")
        ):
            self.error(path, f"expected an integer or a string, got {_describe(value)}")
            return
        expected = schema.get("type")
        if isinstance(expected, str) and not _is_type(value, expected):
            fmt = f" ({schema['format']})" if isinstance(schema.get("format"), str) else ""
            self.error(path, f"expected {expected}{fmt}, got {_describe(value)}")
            return
        self._value(value, schema, path, type_name)
        if isinstance(value, dict):
            self._object(value, schema, path, scope, strict, type_name)
        elif isinstance(value, list):
            self._array(value, schema, path, scope, strict)
        self._junctors(value, schema, path, scope)

    def _value(self, value: Any, schema: Mapping[str, Any], path: Path, type_name: str) -> None:
        """The keywords that restrict a scalar: format, enum, bounds, lengths, pattern."""
        fmt = schema.get("format")
        if (_is_type(value, "integer") and fmt in _INT_RANGES) or (fmt == "int-or-string" and isinstance(value, int)):
            low, high = _INT_RANGES.get(fmt, _INT_RANGES["int32"])
            if not low <= value <= high:
                self.error(path, f"{value} is out of range of {fmt if fmt in _INT_RANGES else 'int32'}")
        if isinstance(value, str):
            if fmt == "byte" and not _is_base64(value):
                self.error(path, f"expected base64 (format byte), got {_describe(value)}")
            elif fmt == "date-time" and not _DATE_TIME_RE.fullmatch(value):
                self.error(path, f"expected an RFC 3339 date-time, got {_describe(value)}")
            elif fmt == "date" and not _DATE_RE.fullmatch(value):
                self.error(path, f"expected a date (YYYY-MM-DD), got {_describe(value)}")
            if type_name == _QUANTITY and not _QUANTITY_RE.fullmatch(value):
                self.error(path, f"expected a quantity (e.g. 100m, 1.5, 64Mi, 1G), got {_describe(value)}")
        if "enum" in schema and not any(_same(value, choice) for choice in schema["enum"]):
            choices = ", ".join(json.dumps(c) for c in schema["enum"])
            self.error(path, f"unsupported value {_describe(value)}: expected one of {choices}")
        if _is_type(value, "number"):
            self._bounds(value, schema, path)
        if isinstance(value, str):
            if "minLength" in schema and len(value) < schema["minLength"]:
                self.error(path, f"expected at least {schema['minLength']} characters, got {len(value)}")
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.error(path, f"expected at most {schema['maxLength']} characters, got {len(value)}")
            if "pattern" in schema and not _search(schema["pattern"], value):
                self.error(path, f"{_describe(value)} does not match the pattern {schema['pattern']!r}")

    def _bounds(self, value: float, schema: Mapping[str, Any], path: Path) -> None:
        if "minimum" in schema:
            low, exclusive = schema["minimum"], schema.get("exclusiveMinimum") is True
            if value < low or (exclusive and value == low):
                self.error(path, f"expected {'>' if exclusive else '>='} {low}, got {value}")
        if "maximum" in schema:
            high, exclusive = schema["maximum"], schema.get("exclusiveMaximum") is True
            if value > high or (exclusive and value == high):
                self.error(path, f"expected {'<' if exclusive else '<='} {high}, got {value}")
        if schema.get("multipleOf") and value % schema["multipleOf"]:
            self.error(path, f"expected a multiple of {schema['multipleOf']}, got {value}")

    def _object(
        self, value: dict[str, Any], schema: Mapping[str, Any], path: Path, scope: _Scope, strict: bool, name: str
    ) -> None:
        properties: Mapping[str, Any] = schema.get("properties", {})
        if schema.get("x-kubernetes-embedded-resource"):
            # apiVersion, kind and metadata of an embedded object (and a custom resource's root) are implicit, and
            # its metadata is ObjectMeta whatever the schema says (the apiserver only lets a CRD narrow the name).
            meta = {"$ref": _REF_PREFIX + _OBJECT_META}
            properties = {**properties, "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": meta}
        for key in schema.get("required", ()):
            nullable = key in value and _resolve(properties.get(key, {}), scope)[0].get("nullable")
            if value.get(key) is None and not nullable:
                self.error((*path, key), "required field missing" if key not in value else "required field is null")
        extra = schema.get("additionalProperties")
        # As the apiserver's strict decoding: a built-in type lists all its fields; a CRD's object without
        # properties is pruned empty. FieldsV1, RawExtension and the like (type object, nothing else) stay open.
        closed = (
            strict
            and schema.get("x-kubernetes-preserve-unknown-fields") is not True
            and extra in (None, False)
            and (bool(properties) or scope.structural or extra is False)
        )
        for key, item in value.items():
            if key in properties:
                if item is not None or _resolve(properties[key], scope)[0].get("nullable"):
                    self.check(item, properties[key], (*path, key), scope, strict)
                # else: null stands for "not set", as in Go's decoding and a CRD's pruning of non-nullable nulls.
            elif isinstance(extra, dict):
                self.check(item, extra, (*path, key), scope, strict)
            elif closed:
                self.error((*path, key), _unknown_field(key, properties, name))
        count = len(value)
        if "minProperties" in schema and count < schema["minProperties"]:
            self.error(path, f"expected at least {schema['minProperties']} properties, got {count}")
        if "maxProperties" in schema and count > schema["maxProperties"]:
            self.error(path, f"expected at most {schema['maxProperties']} properties, got {count}")

    def _array(self, value: list[Any], schema: Mapping[str, Any], path: Path, scope: _Scope, strict: bool) -> None:
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                self.check(item, items, (*path, index), scope, strict)
        if "minItems" in schema and len(value) < schema["minItems"]:
            self.error(path, f"expected at least {schema['minItems']} items, got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.error(path, f"expected at most {schema['maxItems']} items, got {len(value)}")
        # The apiserver refuses duplicates of a CRD's set or map list; built-in lists are left to its Go validation
        # (which allows duplicate env names, for one).
        list_type = schema.get("x-kubernetes-list-type")
        if scope.structural and list_type in ("set", "map"):
            keys = schema.get("x-kubernetes-list-map-keys", ()) if list_type == "map" else ()
            seen: dict[str, int] = {}
            for index, item in enumerate(value):
                identity = json.dumps(
                    [item.get(k) for k in keys] if keys and isinstance(item, dict) else item, sort_keys=True
                )
                if identity in seen:
                    what = ", ".join(f"{k}={json.dumps(item.get(k))}" for k in keys) if keys else json.dumps(item)
                    self.error((*path, index), f"duplicate entry ({what}) of item {seen[identity]} in a {list_type}")
                seen.setdefault(identity, index)

    def _junctors(self, value: Any, schema: Mapping[str, Any], path: Path, scope: _Scope) -> None:
        """allOf, anyOf, oneOf and not: each branch is checked apart, for its verdict (values only)."""
        for branch in schema.get("allOf", ()):
            self.check(value, branch, path, scope, strict=False)
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if not branches:
                continue
            matching = [b for b in branches if not self._trial(value, b, path, scope)]
            if not matching or (keyword == "oneOf" and len(matching) > 1):
                types = [b.get("type") for b in branches]
                if all(isinstance(t, str) and len(b) == 1 for t, b in zip(types, branches, strict=True)):
                    self.error(path, f"expected {' or '.join(map(str, types))}, got {_describe(value)}")
                elif not matching:
                    first = self._trial(value, branches[0], path, scope)
                    self.error(path, f"matches none of {keyword} (the first says: {first[0]})")
                else:
                    self.error(path, f"matches {len(matching)} of oneOf, expected exactly one")
        if "not" in schema and not self._trial(value, schema["not"], path, scope):
            self.error(path, "matches the schema under `not`")

    def _trial(self, value: Any, schema: Mapping[str, Any], path: Path, scope: _Scope) -> list[str]:
        trial = _Walk(self.label, [])
        trial.check(value, schema, path, scope, strict=False)
        return trial.errors


def _resolve(schema: Mapping[str, Any], scope: _Scope) -> tuple[Mapping[str, Any], str, _Scope]:
    """Follow `$ref` and the published specs' `allOf: [{$ref}]` to the named schema; its name comes back for the
    messages, and the scope of a named (built-in) type is never structural."""
    name = ""
    nullable = bool(schema.get("nullable"))
    while True:
        ref = schema.get("$ref")
        all_of = schema.get("allOf")
        if ref is None and all_of and len(all_of) == 1 and "$ref" in all_of[0] and set(schema) <= _REFERENCE_KEYS:
            ref = all_of[0]["$ref"]
        if not isinstance(ref, str):
            break
        name = ref.removeprefix(_REF_PREFIX)
        if name not in scope.schemas:
            raise KeyError(f"the OpenAPI document has no schema {ref!r}")
        schema = scope.schemas[name]
        scope = _Scope(scope.schemas, structural=False)
        nullable = nullable or bool(schema.get("nullable"))
    if nullable and not schema.get("nullable"):
        schema = {**schema, "nullable": True}
    return schema, name, scope


def _unknown_field(key: str, properties: Mapping[str, Any], type_name: str) -> str:
    owner = f" of {_short(type_name)}" if type_name else ""
    hint = difflib.get_close_matches(key, list(properties), n=1)
    did_you_mean = f"; did you mean {hint[0]}?" if hint else ""
    return f"unknown field {json.dumps(key)}{owner} (strict field validation){did_you_mean}"


def _is_type(value: Any, expected: str) -> bool:
    match expected:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
    return True  # a type this module does not know restricts nothing here


def _same(value: Any, choice: Any) -> bool:
    # Python's True == 1: an enum of integers must not accept a boolean, nor one of booleans an integer.
    if _is_type(value, "number") and _is_type(choice, "number"):
        return bool(value == choice)
    return type(value) is type(choice) and bool(value == choice)


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except binascii.Error:
        return False
    return True


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True  # an ECMA-262 pattern Python cannot compile: not checked rather than a false error


def _describe(value: Any) -> str:
    """A value as a message shows it: its JSON type and, for scalars, the value itself (shortened)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, int | float):
        return f"{'integer' if isinstance(value, int) else 'number'} {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"string {json.dumps(shown)}"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__  # e.g. a date that YAML read from an unquoted 2024-01-01


def _short(type_name: str) -> str:
    return type_name.rpartition(".")[2]


def _render(path: Path) -> str:
    """A field path as the apiserver writes it: spec.template.spec.containers[0].name, and a key that is not an
    identifier in brackets: metadata.labels[app.kubernetes.io/name]."""
    if not path:
        return "(root)"
    out = ""
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif _IDENTIFIER_RE.fullmatch(segment):
            out += f".{segment}" if out else segment
        else:
            out += f"[{segment}]"
    return out
