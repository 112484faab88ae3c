"""kubectl-gpu's printing: tables, ages, colour and NO_COLOR, and the -o json|yaml|name shapes."""

import datetime
import io
import json

import pytest
import yaml

from gpu_scheduling.cli import output

NOW = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)


def test_table_aligns_columns_with_three_spaces_and_upper_case_headers():
    lines = output.table(["name", "Phase", "gpus"], [["train", "Bound", "0,1"], ["a", "Pending", "(8)"]])
    assert lines == [
        "NAME    PHASE     GPUS",
        "train   Bound     0,1",
        "a       Pending   (8)",
    ]


def test_table_without_headers_and_empty_tables():
    assert output.table(["a", "b"], [["x", "y"]], headers_shown=False) == ["x   y"]
    assert output.table(["a", "b"], []) == ["A   B"]
    assert output.table(["a", "b"], [], headers_shown=False) == []
    with pytest.raises(ValueError, match="has 1 cells for 2 columns"):
        output.table(["a", "b"], [["x"]])


def test_colour_takes_no_width_in_a_table():
    paint = output.Painter(True)
    lines = output.table(["phase", "node"], [[paint("Bound", "green"), "node1"], ["Pending", "node2"]])
    assert lines[1] == "\x1b[32mBound\x1b[0m     node1"
    assert [output.strip_ansi(line) for line in lines] == ["PHASE     NODE", "Bound     node1", "Pending   node2"]


class FakeStream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    "tty, env, wanted",
    [
        (True, {}, True),
        (False, {}, False),
        (True, {"NO_COLOR": "1"}, False),
        (True, {"NO_COLOR": "yes please"}, False),
        (True, {"NO_COLOR": ""}, True),  # https://no-color.org: set to a non-empty value
        (True, {"TERM": "dumb"}, False),
    ],
)
def test_colour_only_on_a_terminal_and_never_with_no_color(tty, env, wanted):
    assert output.colour_wanted(FakeStream(tty), env) is wanted


def test_painter_off_returns_text_unchanged():
    assert output.Painter(False)("Failed", "red") == "Failed"
    assert output.Painter(True)("Failed", "red") == "\x1b[31mFailed\x1b[0m"
    assert output.Painter(True)("x", None) == "x"


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (45, "45s"),
        (119, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (20 * 3600, "20h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (12 * 86400, "12d"),
        (729 * 86400, "729d"),
        (2 * 365 * 86400 + 30 * 86400, "2y30d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_as_kubectl_prints_them(seconds, shown):
    assert output.human_duration(seconds) == shown


def test_age_of_api_timestamps():
    assert output.age("2024-05-01T11:59:15Z", NOW) == "45s"
    assert output.age("2024-05-01T11:54:59.500000Z", NOW) == "5m"  # a MicroTime
    assert output.age("2024-04-28T12:00:00Z", NOW) == "3d"
    assert output.age(None, NOW) == "<unknown>"
    assert output.age("yesterday", NOW) == "<unknown>"
    assert output.created_age({"metadata": {"creationTimestamp": "2024-05-01T09:00:00Z"}}, NOW) == "3h"


CLAIM = {
    "metadata": {"name": "train", "namespace": "ml", "managedFields": [{"manager": "kubectl"}], "uid": "u1"},
    "spec": {"devices": {"count": 2}},
}


def test_objects_get_kind_and_lose_managed_fields_as_in_kubectl():
    obj = output.clean(CLAIM, "gpu.scheduling/v1", "GpuClaim")
    assert obj["apiVersion"] == "gpu.scheduling/v1" and obj["kind"] == "GpuClaim"
    assert "managedFields" not in obj["metadata"] and obj["metadata"]["uid"] == "u1"
    assert "managedFields" in CLAIM["metadata"], "the input is not changed"


def test_json_and_yaml_lists_have_kubectls_shape():
    doc = output.as_list([output.clean(CLAIM, "gpu.scheduling/v1", "GpuClaim")])
    as_json = output.dump(doc, "json")
    assert as_json.endswith("}\n") and '\n    "items": [' in as_json  # indented by 4, as kubectl
    parsed = json.loads(as_json)
    assert parsed["apiVersion"] == "v1" and parsed["kind"] == "List"
    assert parsed["metadata"] == {"resourceVersion": ""}
    assert [i["metadata"]["name"] for i in parsed["items"]] == ["train"]
    as_yaml = output.dump(doc, "yaml")
    assert as_yaml.startswith("apiVersion: v1\nitems:\n- apiVersion: gpu.scheduling/v1\n")
    assert yaml.safe_load(as_yaml) == parsed
    with pytest.raises(ValueError, match="not a document format"):
        output.dump(doc, "name")


@pytest.mark.parametrize(
    "kind, api_version, shown",
    [
        ("GpuClaim", "gpu.scheduling/v1", "gpuclaim.gpu.scheduling/train"),
        ("GpuNodeStatus", "gpu.scheduling/v1", "gpunodestatus.gpu.scheduling/train"),
        ("Pod", "v1", "pod/train"),
        ("Lease", "coordination.k8s.io/v1", "lease.coordination.k8s.io/train"),
    ],
)
def test_name_output_is_kind_dot_group_slash_name(kind, api_version, shown):
    assert output.resource_name(kind, api_version, "train") == shown


def test_no_resources_lines():
    assert output.no_resources("ml") == "No resources found in ml namespace."
    assert output.no_resources(None) == "No resources found"


def test_key_values_align_values():
    assert output.key_values([("leader", "a"), ("queue order", "FIFO")], indent=0) == [
        "leader        a",
        "queue order   FIFO",
    ]
