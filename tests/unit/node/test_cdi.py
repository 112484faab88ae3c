"""The CDI spec of the NVML path (gpu_scheduling.cdi) and the device plugin's part in it: the spec's shape against
CDI's rules, what a missing driver file or device node leaves out, the file kept in --cdi-dir, and the Allocate
answer's cdi_devices for the chosen GPUs. Plain data and a fake driver root in tmp_path: no GPU, no runtime."""

from __future__ import annotations

import asyncio
import json
import pathlib
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_scheduling import cdi, constants, devices
from gpu_scheduling.agent import deviceplugin
from gpu_scheduling.kubeletapi.deviceplugin import api_pb2 as dp

UUID0 = "GPU-1a2b3c4d-0000-1111-2222-333344445555"
UUID1 = "GPU-9f8e7d6c-0000-1111-2222-333344445555"
GPUS = [devices.NodeGpu(0, UUID0, 0), devices.NodeGpu(1, UUID1, 1)]
ROOT = "/usr/local/nvidia"
FILES = frozenset(
    {
        "bin/nvidia-smi",
        "bin/nvidia-debugdump",
        "lib64/libnvidia-ml.so.1",
        "lib64/libcuda.so.1",
        "glibc/lib/ld-linux-x86-64.so.2",
        "glibc/lib/libc.so.6",
    }
)
DEV = frozenset({"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"})


def full(**kwargs: Any) -> dict[str, Any]:
    return cdi.spec(GPUS, cdi.Driver(ROOT, FILES, DEV), **kwargs)


def mounts(document: dict[str, Any]) -> dict[str, str]:
    return {m["containerPath"]: m["hostPath"] for m in document["containerEdits"].get("mounts", [])}


def test_spec_shape() -> None:
    document = full()
    assert cdi.problems(document) == []
    assert document["cdiVersion"] == cdi.CDI_VERSION == "0.6.0"
    assert document["kind"] == "gpu.scheduling/gpu"
    by_name = {d["name"]: d["containerEdits"] for d in document["devices"]}
    assert set(by_name) == {"0", "1", UUID0, UUID1}
    assert (
        by_name["0"]
        == by_name[UUID0]
        == {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0", "permissions": "rw"}]}
    )
    assert by_name["1"]["deviceNodes"][0]["path"] == "/dev/nvidia1"
    common = document["containerEdits"]
    assert [n["path"] for n in common["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert mounts(document) == {
        f"{ROOT}/bin": f"{ROOT}/bin",
        f"{ROOT}/lib64": f"{ROOT}/lib64",
        f"{ROOT}/glibc": f"{ROOT}/glibc",
        "/usr/bin/nvidia-smi": f"{ROOT}/bin/nvidia-smi",
        "/usr/bin/nvidia-debugdump": f"{ROOT}/bin/nvidia-debugdump",
    }
    assert all(m["options"] == ["ro", "nosuid", "nodev", "bind"] for m in common["mounts"])
    # The image's loader is left alone unless asked for; the libraries are found through LD_LIBRARY_PATH.
    assert common["env"] == [f"LD_LIBRARY_PATH={ROOT}/lib64"]
    assert cdi.SPEC_FILE == "gpu.scheduling-gpu.json"


def test_glibc_loader_is_opt_in_and_comes_with_its_libc() -> None:
    document = full(with_glibc=True)
    assert cdi.problems(document) == []
    assert mounts(document)[cdi.LOADER] == f"{ROOT}/glibc/lib/ld-linux-x86-64.so.2"
    assert document["containerEdits"]["env"] == [f"LD_LIBRARY_PATH={ROOT}/lib64:{ROOT}/glibc/lib"]


def test_missing_files_and_nodes_are_left_out() -> None:
    # No glibc folder, no programs, no uvm: only what exists is given; the loader is asked for but absent.
    driver = cdi.Driver("/opt/driver/", frozenset({"lib64/libnvidia-ml.so.1"}), frozenset({"/dev/nvidia0"}))
    document = cdi.spec(GPUS, driver, with_glibc=True)
    assert cdi.problems(document) == []
    assert {d["name"] for d in document["devices"]} == {"0", UUID0}  # GPU 1 has no /dev/nvidia1
    assert "deviceNodes" not in document["containerEdits"]
    assert mounts(document) == {"/opt/driver/lib64": "/opt/driver/lib64"}
    assert document["containerEdits"]["env"] == ["LD_LIBRARY_PATH=/opt/driver/lib64"]
    # A GPU NVML gave no minor number for is left out too, and with no driver at all there are no common edits.
    bare = cdi.spec([devices.NodeGpu(0, UUID0, None)], cdi.Driver(ROOT))
    assert bare["devices"] == [] and "containerEdits" not in bare
    assert cdi.problems(bare) == ["no devices (a CDI spec needs at least one)"]


def test_a_driver_at_the_root_never_hides_the_images_folders() -> None:
    document = cdi.spec(GPUS, cdi.Driver("/", FILES, DEV), with_glibc=True)
    assert cdi.problems(document) == []
    assert mounts(document) == {
        "/usr/bin/nvidia-smi": "/bin/nvidia-smi",
        "/usr/bin/nvidia-debugdump": "/bin/nvidia-debugdump",
    }
    assert "env" not in document["containerEdits"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.update(kind="gpu.scheduling"), "kind"),
        (lambda d: d.update(kind="9vendor/gpu"), "kind"),
        (lambda d: d.update(kind="vendor.com/gpu/x"), "kind"),
        (lambda d: d["devices"][0].update(name="-0"), "name syntax"),
        (lambda d: d["devices"][0].update(name="gpu/0"), "name syntax"),
        (lambda d: d["devices"][1].update(name="0"), "appears twice"),
        (lambda d: d["devices"][0].update(containerEdits={}), "no containerEdits"),
        (lambda d: d["containerEdits"]["mounts"][0].update(containerPath="usr/bin"), "not absolute"),
        (lambda d: d["containerEdits"]["deviceNodes"][0].update(path="dev/nvidiactl"), "not absolute"),
        (lambda d: d["containerEdits"]["deviceNodes"][0].update(permissions="rx"), "permissions"),
        (lambda d: d["containerEdits"].update(env=["=x"]), "NAME=value"),
        (lambda d: d.update(cdiVersion="0.6"), "semantic version"),
    ],
)
def test_problems_catch_what_cdi_refuses(change: Any, problem: str) -> None:
    document = json.loads(json.dumps(full()))
    change(document)
    found = cdi.problems(document)
    assert found and any(problem in p for p in found), found


uuids = st.uuids().map(lambda u: f"GPU-{u}")


@given(
    gpus=st.lists(st.tuples(st.integers(0, 63), uuids, st.one_of(st.none(), st.integers(0, 255))), max_size=8),
    files=st.sets(st.sampled_from(sorted(FILES | {"lib64/sub/libx.so", "glibc/ld-linux-x86-64.so.2", "other/f"}))),
    dev=st.sets(st.sampled_from([*devices.NVIDIA_CONTROL_DEVICES, *(f"/dev/nvidia{i}" for i in range(4))])),
    root=st.sampled_from(["/usr/local/nvidia", "/usr/local/nvidia/", "/home/kubernetes/bin/nvidia", "/"]),
    with_glibc=st.booleans(),
)
def test_any_inventory_gives_a_valid_spec_of_exactly_its_present_gpus(
    gpus: list[tuple[int, str, int | None]], files: set[str], dev: set[str], root: str, with_glibc: bool
) -> None:
    unique = list({i: devices.NodeGpu(i, u, m) for i, u, m in gpus}.values())
    unique = list({g.uuid: g for g in unique}.values())
    document = cdi.spec(unique, cdi.Driver(root, frozenset(files), frozenset(dev)), with_glibc=with_glibc)
    present = [g for g in unique if g.minor is not None and f"/dev/nvidia{g.minor}" in dev]
    problems = cdi.problems(document)
    assert problems == ([] if present else ["no devices (a CDI spec needs at least one)"])
    names = {d["name"] for d in document["devices"]}
    assert names == {str(g.id) for g in present} | {g.uuid for g in present}
    common = document.get("containerEdits", {})
    # Every host path given is one that exists: a listed file's folder, a listed file, a present device node.
    for mount in common.get("mounts", []):
        rel = mount["hostPath"][len(root.rstrip("/")) + 1 :]
        assert mount["hostPath"].startswith(root.rstrip("/") + "/")
        assert rel in files or any(f.startswith(rel + "/") for f in files)
        # Nothing of the image's own system folders is ever hidden: only the driver's paths and /usr/bin/<program>.
        assert mount["containerPath"] in (mount["hostPath"], cdi.LOADER) or mount["containerPath"].startswith(
            "/usr/bin/nvidia-"
        )
        assert mount["containerPath"] not in ("/", "/bin", "/lib64", "/usr", "/usr/bin", "/lib")
    assert {n["path"] for n in common.get("deviceNodes", [])} <= dev
    assert (cdi.LOADER in {m["containerPath"] for m in common.get("mounts", [])}) == (
        with_glibc
        and root != "/"
        and any(f.startswith("glibc/") and f.endswith("/ld-linux-x86-64.so.2") for f in files)
    )


# ---- the device plugin's part ------------------------------------------------------------------------------------


def fake_driver_root(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "nvidia"
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "lib64" / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    (root / "share").mkdir()
    (root / "share" / "not-given").write_text("")
    return root


def test_driver_listing_reads_the_root(tmp_path: pathlib.Path) -> None:
    root = fake_driver_root(tmp_path)
    driver = deviceplugin.driver_listing(str(root), GPUS)
    assert driver.files == FILES | {"lib64/libnvidia-ml.so"}
    assert driver.root == str(root)
    assert all(d.startswith("/dev/nvidia") for d in driver.dev)  # what this machine has; none on a CI runner


def inventory(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> deviceplugin.Inventory:
    root = fake_driver_root(tmp_path)
    monkeypatch.setattr(
        deviceplugin, "_present", lambda paths: [p for p in paths if p in DEV]
    )  # this machine's /dev has no GPU
    inv = deviceplugin.Inventory("nvml", "node1", "", None, cdi_dir=str(tmp_path / "cdi"), driver_root=str(root))
    inv.identity = {g.id: g for g in GPUS}
    return inv


def test_spec_file_is_written_and_kept(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = inventory(tmp_path, monkeypatch)
    inv.write_cdi()
    path = tmp_path / "cdi" / cdi.SPEC_FILE
    document = json.loads(path.read_text())
    assert cdi.problems(document) == []
    assert {d["name"] for d in document["devices"]} == {"0", "1", UUID0, UUID1}
    assert mounts(document)["/usr/bin/nvidia-smi"] == str(tmp_path / "nvidia" / "bin" / "nvidia-smi")
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == [cdi.SPEC_FILE]  # no temporary file left
    # The inventory changes: GPU 1 is gone, and the file follows.
    inv.identity = {0: GPUS[0]}
    inv.write_cdi()
    assert {d["name"] for d in json.loads(path.read_text())["devices"]} == {"0", UUID0}
    # No GPU left: a spec without devices is not CDI, so there is no file.
    inv.identity = {}
    inv.write_cdi()
    assert not path.exists()


def test_simulated_source_keeps_no_spec(tmp_path: pathlib.Path) -> None:
    inv = deviceplugin.Inventory("simulated", "node1", "", str(tmp_path / "files"), cdi_dir=str(tmp_path / "cdi"))
    inv.identity = {g.id: g for g in GPUS}
    inv.write_cdi()
    assert not (tmp_path / "cdi").exists()
    assert inv.cdi_devices(GPUS) == []


class Aborted(Exception):
    pass


class Context:
    async def abort(self, code: Any, details: str) -> None:
        raise Aborted(details)


def allocate(inv: deviceplugin.Inventory, gpus: tuple[int, ...], ids: list[str]) -> dp.AllocateResponse:
    """One Allocate through the plugin, the container already matched (as GetPreferredAllocation leaves it)."""

    async def go() -> dp.AllocateResponse:
        plugin = deviceplugin.DevicePlugin(
            None, deviceplugin.Kubelet("/nonexistent", "/nonexistent"), inv, resource="r", slots=2, socket_name="s"
        )
        wanted = devices.Wanted("ns", "p", "u", gpus, (("c", len(gpus)),))
        plugin._pending = (devices.Match(wanted, "c", len(gpus)), time.monotonic())
        request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
        return await plugin.allocate(request, Context())  # type: ignore[arg-type]  # only abort is used

    return asyncio.run(go())


def test_allocate_names_the_chosen_gpus_cdi_devices(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = inventory(tmp_path, monkeypatch)
    inv.control = ["/dev/nvidiactl"]
    answer = allocate(inv, (1,), ["gpu1-0"]).container_responses[0]
    assert [d.name for d in answer.cdi_devices] == [f"gpu.scheduling/gpu={UUID1}"]
    # The device specs and variables stay, for a runtime without CDI.
    assert [d.host_path for d in answer.devices] == ["/dev/nvidia1", "/dev/nvidiactl"]
    assert answer.envs[constants.NVIDIA_DEVICES_ENV] == UUID1
    both = allocate(inv, (0, 1), ["gpu1-1", "gpu0-0"]).container_responses[0]
    assert [d.name for d in both.cdi_devices] == [f"gpu.scheduling/gpu={UUID0}", f"gpu.scheduling/gpu={UUID1}"]
    # Every name answered is a device of the spec written.
    inv.write_cdi()
    written = {d["name"] for d in json.loads((tmp_path / "cdi" / cdi.SPEC_FILE).read_text())["devices"]}
    assert {d.name.split("=", 1)[1] for d in both.cdi_devices} <= written


def test_allocate_without_cdi_answers_no_cdi_devices(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = inventory(tmp_path, monkeypatch)
    inv.cdi_dir = ""
    answer = allocate(inv, (0,), ["gpu0-0"]).container_responses[0]
    assert list(answer.cdi_devices) == []
    assert [d.host_path for d in answer.devices] == ["/dev/nvidia0"]


def test_another_kind_is_named_and_not_written(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = inventory(tmp_path, monkeypatch)
    inv.cdi_kind = "nvidia.com/gpu"
    inv.write_cdi()
    assert not (tmp_path / "cdi").exists()
    answer = allocate(inv, (0,), ["gpu0-0"]).container_responses[0]
    assert [d.name for d in answer.cdi_devices] == [f"nvidia.com/gpu={UUID0}"]


def test_flags() -> None:
    args = deviceplugin.parse_args(["--source", "nvml"])
    assert (args.cdi_dir, args.driver_root, args.cdi_glibc) == ("/var/run/cdi", "/usr/local/nvidia", False)
    args = deviceplugin.parse_args(["--source", "nvml", "--cdi-dir", "", "--driver-root", "/opt/d", "--cdi-glibc"])
    assert (args.cdi_dir, args.driver_root, args.cdi_glibc) == ("", "/opt/d", True)
    assert deviceplugin.parse_args(["--source", "nvml", "--cdi-kind", "nvidia.com/gpu"]).cdi_kind == "nvidia.com/gpu"
    with pytest.raises(SystemExit):
        deviceplugin.parse_args(["--source", "nvml", "--cdi-kind", "nvidia.com"])
