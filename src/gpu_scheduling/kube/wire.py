"""What both clients (`client.Client`, `sync.SyncClient`) put on the wire, defined once."""

from typing import Any, Final

#: A Kubernetes object or list as decoded JSON.
JSON = dict[str, Any]

#: PATCH kinds by name, as both clients accept them.
PATCH_CONTENT_TYPES: Final[dict[str, str]] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
