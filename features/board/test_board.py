"""gpu-board end to end (board.feature, @board): the real console script against the session's apiserver, its page in
a real headless Chromium (harness/browser.py), its HTTP API over TLS verified against its own CA; on the KinD tier
the deployed board's /api/state through the apiserver's service proxy.

The page is read only through the DOM hooks the board's contract names (GPU cells `[data-node][data-gpu]` with
`data-holders` and `data-flags`, `[data-pod]` blocks inside them, `#board[data-version]`, `#status[data-state]`,
the form `#create-form` and its buttons, `#created [data-workload]`), never through its look. Each step that reads
the page or the state tries again until what it expects is there (the page follows the cluster through its event
stream, a few updates a second at most) or EVENTUALLY seconds have passed.

Pods are named `<namespace>/<name>` as the board names them; a StatefulSet's pod N is the `statefulset` fixture's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from pytest_bdd import given, scenarios, then, when
from selenium.common.exceptions import NoAlertPresentException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from features.support import (
    SYSTEM_NAMESPACE,
    TESTBED,
    WORKER_NODES,
    StatefulSet,
    World,
    claim_status,
    get_pod,
    pods_on_mapped_nodes,
    step,
)
from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import DEFAULT_SIMULATED, node_status, parse_simulated, simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from harness import manifests
from harness.board import BoardProcess
from harness.browser import Browser
from harness.inventory import publish
from harness.wait import wait_for

scenarios("board.feature")

#: How long a step that reads the page or the state keeps trying.
EVENTUALLY = 30.0
ROOT = pathlib.Path(__file__).parents[2]
SCREENSHOT = ROOT / "build" / "board" / "board.png"
#: Where the deployed board is: the chart's Service (board.name, which the deploy role sets to keys.yaml's
#: board_name) in the test-bed's system namespace, and the name of its HTTPS port, as the service proxy takes them.
BOARD_SERVICE: str = manifests.chart_defaults()["board"]["name"] or TESTBED["testbed_keys"]["board_name"]
BOARD_SERVICE_PORT = "https"


# ---- the scene: boards, the browser and what the steps hand on -------------------------------------------------


@dataclasses.dataclass
class Scene:
    """The boards this scenario started (the last one is `board`, the one the steps talk to), the browser, and
    what a step hands to a later one."""

    world: World
    boards: list[BoardProcess] = dataclasses.field(default_factory=list)
    browser: Browser | None = None
    fetch_state: Callable[[], dict[str, Any]] | None = None
    response: httpx.Response | None = None
    marker: str = ""
    time_origin: float = 0.0
    version: int = 0
    #: What the scenario undoes at its end, last first (every step is undone even when one undo fails).
    undo: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)

    @property
    def namespace(self) -> str:
        return self.world.namespace

    @property
    def board(self) -> BoardProcess:
        assert self.boards, "no gpu-board was started in this scenario"
        return self.boards[-1]

    @property
    def page(self) -> Browser:
        assert self.browser is not None, "the board was not opened in Chromium"
        return self.browser

    def state(self) -> dict[str, Any]:
        """/api/state now: from the board process, or through the service proxy on KinD."""
        if self.fetch_state is not None:
            return self.fetch_state()
        with self.board.client() as client:
            resp = client.get("/api/state")
        assert resp.status_code == 200, f"GET /api/state: HTTP {resp.status_code}: {resp.text[:500]}"
        return resp.json()  # type: ignore[no-any-return]

    def pod(self, name: str) -> str:
        return f"{self.namespace}/{name}"


@pytest.fixture
def scene(world: World) -> Iterator[Scene]:
    s = Scene(world)
    with s.undo:
        yield s


def eventually(what: str, check: Callable[[], None], timeout: float = EVENTUALLY) -> None:
    """Run `check` until it passes (its last AssertionError after `timeout`)."""
    last: list[AssertionError] = []

    def probe() -> bool:
        try:
            check()
        except AssertionError as exc:
            last[:] = [exc]
            return False
        return True

    try:
        wait_for(what, probe, timeout=timeout, interval=0.25)
    except AssertionError:
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: {last[0] if last else ''}") from None


# ---- reading the page ------------------------------------------------------------------------------------------

#: Where on the page each block of a pod is: [[node, gpu id], ...] of the cells holding its `[data-pod]` blocks.
_BLOCKS_OF = """
const out = [];
for (const block of document.querySelectorAll('[data-pod="' + CSS.escape(arguments[0]) + '"]')) {
  const cell = block.closest('[data-gpu]');
  out.push(cell ? [cell.getAttribute('data-node'), Number(cell.getAttribute('data-gpu'))] : [null, null]);
}
return out;
"""
#: A GPU cell's attributes, or null when there is no such cell.
_CELL = """
const cell = document.querySelector('[data-node="' + CSS.escape(arguments[0]) + '"][data-gpu="' + arguments[1] + '"]');
if (!cell) return null;
const r = cell.getBoundingClientRect();
return {holders: (cell.getAttribute('data-holders') || '').split(/\\s+/).filter(Boolean),
        flags: (cell.getAttribute('data-flags') || '').split(/\\s+/).filter(Boolean),
        health: cell.getAttribute('data-health'),
        rect: [r.left, r.top, r.right, r.bottom],
        blocks: Array.from(cell.querySelectorAll('[data-pod]')).map(b => {
          const q = b.getBoundingClientRect();
          return {pod: b.getAttribute('data-pod'), rect: [q.left, q.top, q.right, q.bottom]};
        })};
"""


def page_blocks(scene: Scene, pod: str) -> set[tuple[str, int]]:
    return {(node, gpu) for node, gpu in scene.page.js(_BLOCKS_OF, pod)}


def page_cell(scene: Scene, node: str, gpu: int) -> dict[str, Any]:
    cell = scene.page.js(_CELL, node, gpu)
    assert cell is not None, f'the page has no cell [data-node="{node}"][data-gpu="{gpu}"]'
    return cell  # type: ignore[no-any-return]


def page_version(scene: Scene) -> int:
    value = scene.page.js("const b = document.getElementById('board'); return b && b.getAttribute('data-version');")
    assert value not in (None, ""), "#board has no data-version"
    return int(value)


def assert_page_holds(scene: Scene, pod: str, node: str, gpus: list[int]) -> None:
    """`pod`'s blocks are in exactly the cells of `gpus` on `node`, and each of those cells lists it in data-holders."""
    expected = {(node, g) for g in gpus}
    blocks = page_blocks(scene, pod)
    assert blocks == expected, (
        f"the page shows {pod}'s blocks in the cells {sorted(blocks)}, expected {sorted(expected)}"
    )
    for g in gpus:
        cell = page_cell(scene, node, g)
        assert pod in cell["holders"], f"{node} GPU {g}: data-holders {cell['holders']} do not name {pod}"


# ---- reading /api/state ----------------------------------------------------------------------------------------


def state_gpu(state: dict[str, Any], node: str, gpu: int) -> dict[str, Any]:
    assert node in state.get("nodes", {}), f"/api/state has no node {node}; nodes: {sorted(state.get('nodes', {}))}"
    for g in state["nodes"][node].get("gpus") or []:
        if g.get("id") == gpu:
            return g  # type: ignore[no-any-return]
    raise AssertionError(f"/api/state lists no GPU {gpu} on {node}")


def state_holds(state: dict[str, Any], pod: str) -> set[tuple[str, int]]:
    """The (node, gpu) of every GPU that /api/state says `pod` holds."""
    return {
        (name, g["id"])
        for name, node in (state.get("nodes") or {}).items()
        for g in node.get("gpus") or []
        if any(h.get("pod") == pod for h in g.get("holders") or [])
    }


def assert_state_holds(scene: Scene, pod: str, node: str, gpus: list[int]) -> dict[str, Any]:
    state = scene.state()
    assert state.get("apiVersion") == constants.BOARD_API_VERSION and state.get("kind") == "Board", (
        f"/api/state is not a {constants.BOARD_API_VERSION} Board: {state.get('apiVersion')} {state.get('kind')}"
    )
    holds = state_holds(state, pod)
    expected = {(node, g) for g in gpus}
    assert holds == expected, f"/api/state says {pod} holds {sorted(holds)}, expected {sorted(expected)}"
    return state


def ids(text: str) -> list[int]:
    return [int(i) for i in text.split(",")]


# ---- gpu-board and the browser ---------------------------------------------------------------------------------


@given("gpu-board runs with creation allowed in the scenario's namespace")
def board_running(scene: Scene) -> None:
    cp = scene.world.cluster.cp
    assert cp is not None, "the control-plane tier starts gpu-board itself; on KinD it is deployed"
    board = BoardProcess(cp, namespaces=[scene.namespace], allow_create=True)
    scene.boards.append(board)
    scene.undo.callback(board.stop)
    board.start()


@given("a second gpu-board runs without --allow-create")
def second_board(scene: Scene) -> None:
    cp = scene.world.cluster.cp
    assert cp is not None
    board = BoardProcess(cp, name=f"{constants.BOARD_NAME}-readonly", namespaces=[scene.namespace], allow_create=False)
    scene.boards.append(board)
    scene.undo.callback(board.stop)
    board.start()


@given("the board is opened in Chromium")
@when("the board is opened in Chromium")
def open_board(scene: Scene) -> None:
    cp = scene.world.cluster.cp
    if scene.browser is not None:
        scene.browser.close()
    log = cp.logs / "chromedriver.log" if cp is not None else None
    scene.browser = Browser([b.spki_pin for b in scene.boards], log_path=log)
    scene.undo.callback(scene.browser.close)
    scene.browser.driver.get(f"{scene.board.url}/")

    def live() -> bool:
        state = scene.page.js("const s = document.getElementById('status'); return s && s.getAttribute('data-state');")
        return state == "live"

    wait_for("#status[data-state=live] (the page's event stream connected)", live, timeout=EVENTUALLY)
    assert page_version(scene) >= 0


@then("the page logged no error")
def no_console_errors(scene: Scene) -> None:
    errors = scene.page.console_errors()
    assert not errors, "the page logged errors to its console:\n" + "\n".join(errors)


@then("a screenshot of the board is saved")
def screenshot(scene: Scene) -> None:
    # The picture of the settled board: after the page's finite animations (a block that just landed blinks).
    wait_for(
        "the page's animations finished",
        lambda: scene.page.js(
            "return document.getAnimations().every(a => a.playState !== 'running' "
            "|| a.effect.getComputedTiming().iterations === Infinity);"
        ),
        timeout=EVENTUALLY,
    )
    path = scene.page.screenshot(SCREENSHOT)
    assert path.stat().st_size > 10_000, f"{path}: {path.stat().st_size} bytes, too small to show the board"
    extra = os.environ.get("BOARD_SCREENSHOT_DIR")
    if extra:
        pathlib.Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, pathlib.Path(extra) / path.name)
    print(f"\nscreenshot of the board: {path}")


# ---- the take-home on the board --------------------------------------------------------------------------------


@given(step("all {replicas:d} pods run on their mapped nodes"))
def all_pods_placed(world: World, statefulset: StatefulSet, replicas: int) -> None:
    pods_on_mapped_nodes(world, statefulset, replicas)


@given("every kwok node's GpuNodeStatus lists 8 GPUs and the pods using them, as the inventory agent writes it")
def agent_inventories(scene: Scene, world: World) -> None:
    # What the agent would write now (gpu_scheduling.agent.inventory.node_status): the simulated GPUs, each with
    # the pods that its Leases and the map pods bound to the node name. No agent runs on kwok nodes.
    devices = parse_simulated(DEFAULT_SIMULATED)
    statuses = {}
    for node in WORKER_NODES:
        leases = world.api.get(paths.GPU_LEASES, labelSelector=objects.node_lease_selector(node))["items"]
        pods = world.api.get(paths.ALL_PODS, fieldSelector=f"spec.nodeName={node}")["items"]
        statuses[node] = node_status(devices, leases, pods)
    # They name this scenario's pods: afterwards, every node's inventory has none in use again.
    scene.undo.callback(publish, world.cluster.kubeconfig, dict.fromkeys(WORKER_NODES, simulated_status()))
    publish(world.cluster.kubeconfig, statuses)


@then(step('the page and /api/state show pod {index:d} on {node} with GPUs "{gpus:q}"'))
def page_and_state_show(scene: Scene, statefulset: StatefulSet, index: int, node: str, gpus: str) -> None:
    pod = f"{statefulset.namespace}/{statefulset.pod(index)}"
    eventually(f"the page showing {pod} on {node} GPUs {gpus}", lambda: assert_page_holds(scene, pod, node, ids(gpus)))
    eventually(
        f"/api/state showing {pod} on {node} GPUs {gpus}", lambda: assert_state_holds(scene, pod, node, ids(gpus))
    )


@then(step('/api/state shows pod {index:d} on {node} with GPUs "{gpus:q}"'))
def state_shows(scene: Scene, statefulset: StatefulSet, index: int, node: str, gpus: str) -> None:
    pod = f"{statefulset.namespace}/{statefulset.pod(index)}"
    eventually(
        f"/api/state showing {pod} on {node} GPUs {gpus}", lambda: assert_state_holds(scene, pod, node, ids(gpus))
    )


@then(step("{node}'s GPU {gpu:d} is split into the two blocks of pods {a:d} and {b:d}"))
def split_cell(scene: Scene, statefulset: StatefulSet, node: str, gpu: int, a: int, b: int) -> None:
    pods = [f"{statefulset.namespace}/{statefulset.pod(i)}" for i in (a, b)]
    cell = page_cell(scene, node, gpu)
    ours = [blk for blk in cell["blocks"] if blk["pod"] in pods]
    assert sorted(blk["pod"] for blk in ours) == sorted(pods), f"{node} GPU {gpu} has the blocks {cell['blocks']}"
    assert set(pods) <= set(cell["holders"]), f"{node} GPU {gpu}: data-holders {cell['holders']}"
    left, top, right, bottom = cell["rect"]
    for blk in ours:
        x0, y0, x1, y1 = blk["rect"]
        assert x1 > x0 and y1 > y0, f"the block of {blk['pod']} has no area: {blk['rect']}"
        slack = 1.0  # sub-pixel borders
        assert left - slack <= x0 and x1 <= right + slack and top - slack <= y0 and y1 <= bottom + slack, (
            f"the block of {blk['pod']} {blk['rect']} is outside its cell {cell['rect']}"
        )
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = (blk["rect"] for blk in ours)
    overlap = max(0.0, min(ax1, bx1) - max(ax0, bx0)) * max(0.0, min(ay1, by1) - max(ay0, by0))
    assert overlap <= 1.0, f"the two blocks overlap in {node} GPU {gpu}: {ours}"


@then("no GPU holding a pod of the StatefulSet is flagged")
def no_flags(scene: Scene, statefulset: StatefulSet) -> None:
    state = scene.state()
    ours = f"{statefulset.namespace}/{statefulset.name}-"
    flagged = []
    for name, node in state["nodes"].items():
        for g in node.get("gpus") or []:
            if any(h.get("pod", "").startswith(ours) for h in g.get("holders") or []):
                if g.get("flags"):
                    flagged.append(f"/api/state {name} GPU {g['id']}: {g['flags']}")
                cell = page_cell(scene, name, g["id"])
                if cell["flags"]:
                    flagged.append(f"page {name} GPU {g['id']}: data-flags {cell['flags']}")
    assert not flagged, "\n".join(flagged)


# ---- a claim pod from another client ---------------------------------------------------------------------------


@given("the page is marked and its board version noted")
def mark_page(scene: Scene) -> None:
    scene.marker = uuid.uuid4().hex
    scene.time_origin = scene.page.js(
        "window.__boardTestMarker = arguments[0]; return performance.timeOrigin;", scene.marker
    )
    scene.version = page_version(scene)


def claim_allocation(world: World, claim: str) -> tuple[str, list[int]]:
    status = wait_for(
        f"GpuClaim {claim} Bound",
        lambda: (s := claim_status(world, claim)).get("phase") == "Bound" and s,
        timeout=60,
    )
    return status["nodeName"], [int(g) for g in status["gpuIds"]]


@then(step('the pod "{name:q}" is bound to the GPUs its GpuClaim "{claim:q}" was allocated'))
def pod_bound_to_claim(world: World, name: str, claim: str) -> None:
    node, gpus = claim_allocation(world, claim)
    assert gpus, f"GpuClaim {claim} is Bound to no GPU"
    pod = wait_for(f"pod {name} bound", lambda: (p := get_pod(world, name))["spec"].get("nodeName") and p, timeout=60)
    assert pod["spec"]["nodeName"] == node, f"pod {name} is on {pod['spec']['nodeName']}, its claim on {node}"


@then(step('the page shows the pod "{name:q}" on the GPUs of its GpuClaim "{claim:q}"'))
def page_shows_claim_pod(scene: Scene, name: str, claim: str) -> None:
    node, gpus = claim_allocation(scene.world, claim)
    pod = scene.pod(name)
    eventually(f"the page showing {pod} on {node} GPUs {gpus}", lambda: assert_page_holds(scene, pod, node, gpus))
    eventually(f"/api/state showing {pod} on {node} GPUs {gpus}", lambda: assert_state_holds(scene, pod, node, gpus))


@then("the page was not reloaded and its board version increased")
def not_reloaded(scene: Scene) -> None:
    marker, origin = scene.page.js("return [window.__boardTestMarker || null, performance.timeOrigin];")
    assert marker == scene.marker and origin == scene.time_origin, (
        f"the page was reloaded: marker {marker!r} (set {scene.marker!r}), "
        f"timeOrigin {origin} (was {scene.time_origin})"
    )
    version = page_version(scene)
    assert version > scene.version, f"#board[data-version] is {version}, it was {scene.version} before"


# ---- the create form -------------------------------------------------------------------------------------------


def form_field(scene: Scene, name: str) -> list[WebElement]:
    form = scene.page.driver.find_element(By.ID, "create-form")
    fields = form.find_elements(By.CSS_SELECTOR, f'[name="{name}"]')
    assert fields, f"#create-form has no field named {name!r}"
    return fields


def set_field(scene: Scene, name: str, value: str) -> None:
    """Set the form's field `name` as a user would: pick the radio button or the option, or type the text."""
    fields = form_field(scene, name)
    first = fields[0]
    kind = (first.get_attribute("type") or "").lower()
    if kind == "radio":
        choice = [f for f in fields if f.get_attribute("value") == value]
        assert choice, f"#create-form: no {name} radio button with the value {value!r}"
        try:
            choice[0].click()
        except WebDriverException:  # a radio drawn by its label
            scene.page.driver.execute_script("arguments[0].click();", choice[0])
    elif first.tag_name.lower() == "select":
        wait_for(
            f"the option {value!r} of the {name} field",
            lambda: value in [o.get_attribute("value") for o in Select(first).options],
            timeout=EVENTUALLY,
        )
        Select(first).select_by_value(value)
    else:
        first.clear()
        first.send_keys(value)
    actual = scene.page.js(
        "const f = document.getElementById('create-form').elements[arguments[0]]; return f && f.value;", name
    )
    assert actual == value, f"#create-form field {name} holds {actual!r} after setting {value!r}"


def click(scene: Scene, selector: str) -> None:
    scene.page.driver.find_element(By.CSS_SELECTOR, selector).click()
    with contextlib.suppress(NoAlertPresentException):  # a page may ask to confirm
        scene.page.driver.switch_to.alert.accept()


@when(step('the form is filled with a claim "{name:q}" of {count:d} GPUs with policy "{policy:q}"'))
def fill_form(scene: Scene, name: str, count: int, policy: str) -> None:
    set_field(scene, "kind", "claim")
    set_field(scene, "namespace", scene.namespace)
    set_field(scene, "name", name)
    set_field(scene, "count", str(count))
    set_field(scene, "policy", policy)


@when("the preview button is clicked")
def click_preview(scene: Scene) -> None:
    click(scene, "#preview-button")


@when("the create button is clicked")
def click_create(scene: Scene) -> None:
    click(scene, "#create-button")


def element_text(scene: Scene, element_id: str) -> str:
    return (
        scene.page.js(  # type: ignore[no-any-return]
            "const e = document.getElementById(arguments[0]); return e ? e.textContent : null;", element_id
        )
        or ""
    )


@then(step('the preview shows the dry-run GpuClaim "{claim:q}" and Pod "{pod:q}"'))
def preview_shows(scene: Scene, claim: str, pod: str) -> None:
    def shown() -> None:
        text = element_text(scene, "preview-output")
        for word in ("GpuClaim", "Pod", claim, pod, scene.namespace, constants.BOARD_CREATED_LABEL):
            assert word in text, f"#preview-output does not show {word!r}: {text[:1000]!r}"

    eventually("#preview-output showing the dry-run objects", shown)


@then(step('there is no GpuClaim "{claim:q}" and no pod "{pod:q}"'))
def nothing_there(world: World, claim: str, pod: str) -> None:
    def gone(path: str) -> bool:
        try:
            world.api.get(path)
        except NotFound:
            return True
        return False

    for path in (paths.gpu_claim(world.namespace, claim), paths.pod(world.namespace, pod)):
        wait_for(f"{path} gone", lambda path=path: gone(path), timeout=60)


@then(step('the page lists the created workload "{name:q}"'))
def created_listed(scene: Scene, name: str) -> None:
    selector = f'#created [data-workload="{scene.namespace}/{name}"] button.delete'

    def listed() -> None:
        assert scene.page.driver.find_elements(By.CSS_SELECTOR, selector), f"no {selector}"

    eventually(f"{selector} on the page", listed)


@when(step('the workload "{name:q}" is deleted with its button in the created list'))
def delete_workload(scene: Scene, name: str) -> None:
    click(scene, f'#created [data-workload="{scene.namespace}/{name}"] button.delete')


@then(step('the page no longer shows the pod "{name:q}"'))
def page_forgot(scene: Scene, name: str) -> None:
    pod = scene.pod(name)

    def gone() -> None:
        blocks = page_blocks(scene, pod)
        assert not blocks, f"the page still shows {pod} in {sorted(blocks)}"

    eventually(f"the blocks of {pod} gone from the page", gone)


# ---- creation refused ------------------------------------------------------------------------------------------


def post_claim(scene: Scene, endpoint: str, name: str, origin: str | None) -> None:
    form = {"kind": "claim", "namespace": scene.namespace, "name": name, "count": 1, "policy": "contiguous"}
    headers = {"Origin": origin} if origin is not None else {}
    with scene.board.client() as client:
        scene.response = client.post(endpoint, json=form, headers=headers)


@when(step('a claim "{name:q}" is posted to {endpoint} with the Origin "{origin:q}"'))
def post_foreign(scene: Scene, name: str, endpoint: str, origin: str) -> None:
    post_claim(scene, endpoint, name, origin)


@when(step('a claim "{name:q}" is posted to {endpoint} without an Origin'))
def post_no_origin(scene: Scene, name: str, endpoint: str) -> None:
    post_claim(scene, endpoint, name, None)


@when(step('a claim "{name:q}" is posted to {endpoint} with the board\'s own Origin'))
def post_same_origin(scene: Scene, name: str, endpoint: str) -> None:
    post_claim(scene, endpoint, name, scene.board.url)


@then(step("the board answers {code:d}"))
def answers(scene: Scene, code: int) -> None:
    resp = scene.response
    assert resp is not None
    assert resp.status_code == code, f"HTTP {resp.status_code}, expected {code}: {resp.text[:500]}"


@then(step("the board answers {code:d} with a JSON error"))
def answers_error(scene: Scene, code: int) -> dict[str, Any]:
    answers(scene, code)
    assert scene.response is not None
    body = scene.response.json()
    assert body.get("kind") == "Error" and body.get("status") == code and body.get("message"), body
    return body  # type: ignore[no-any-return]


@then(step('the board answers {code:d} with a JSON error saying "{fragment:q}"'))
def answers_error_saying(scene: Scene, code: int, fragment: str) -> None:
    body = answers_error(scene, code)
    assert fragment in body["message"], body


@then("/api/config says creation is off")
def config_off(scene: Scene) -> None:
    with scene.board.client() as client:
        config = client.get("/api/config").json()
    assert config.get("kind") == "BoardConfig" and config.get("allowCreate") is False, config


@then("the page shows that creation is off")
def page_creation_off(scene: Scene) -> None:
    def off() -> None:
        state = scene.page.js(
            """
            const form = document.getElementById('create-form');
            const button = document.getElementById('create-button');
            const shown = e => !!e && e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
            return {form: shown(form), button: shown(button), disabled: !!button && button.disabled,
                    fieldset: !!form && !!form.querySelector('fieldset:disabled'),
                    text: document.body.innerText};
            """
        )
        usable = state["form"] and state["button"] and not state["disabled"] and not state["fieldset"]
        assert not usable, "the create form and its button are shown and enabled on a board without --allow-create"
        assert "--allow-create" in state["text"] or "creation is off" in state["text"].lower(), (
            "the page does not say why creation is off (neither 'creation is off' nor '--allow-create' in its text)"
        )

    eventually("the page showing creation off", off)


# ---- a disagreement --------------------------------------------------------------------------------------------


@when(step("a GPU Lease for {node} GPU {gpu:d} naming a pod uid that no pod has is created by hand"))
def orphan_lease(scene: Scene, node: str, gpu: int) -> None:
    body = objects.lease_body(node, gpu, "Exclusive", {str(uuid.uuid4()): scene.pod("ghost")})
    scene.world.api.create(paths.GPU_LEASES, body)
    scene.undo.callback(scene.world.api.delete, paths.lease(constants.LEASE_NAMESPACE, body["metadata"]["name"]))


@then(step('the page flags {node} GPU {gpu:d} with "{kind:q}"'))
def page_flags(scene: Scene, node: str, gpu: int, kind: str) -> None:
    def flagged() -> None:
        cell = page_cell(scene, node, gpu)
        assert kind in cell["flags"], f"{node} GPU {gpu}: data-flags {cell['flags']}"

    eventually(f"{node} GPU {gpu} flagged {kind} on the page", flagged)


@then(step('/api/state flags {node} GPU {gpu:d} with "{kind:q}"'))
def state_flags(scene: Scene, node: str, gpu: int, kind: str) -> None:
    g = state_gpu(scene.state(), node, gpu)
    flags = [f for f in g.get("flags") or [] if f.get("kind") == kind]
    assert flags and flags[0].get("severity") == "error" and flags[0].get("message"), g
    assert any(h.get("pod") == scene.pod("ghost") and "lease" in h.get("sources", []) for h in g["holders"]), g


# ---- the deployed board (KinD) ---------------------------------------------------------------------------------


@given(step('the deployed take-home StatefulSet "{name:q}" in namespace "{namespace:q}"'), target_fixture="statefulset")
def deployed_takehome(name: str, namespace: str) -> StatefulSet:
    return StatefulSet(name, namespace)


@when("the deployed board's /api/state is read through the apiserver's service proxy")
def through_proxy(scene: Scene) -> None:
    path = (
        f"{paths.CORE_API}/namespaces/{SYSTEM_NAMESPACE}/services/"
        f"https:{BOARD_SERVICE}:{BOARD_SERVICE_PORT}/proxy/api/state"
    )
    scene.fetch_state = lambda: scene.world.api.get(path)
    wait_for(f"GET {path}", scene.state, timeout=60)


# ---- the kubelet's view (gpu-device-plugin) --------------------------------------------------------------------


@when(step('{node}\'s GpuNodeStatus says the kubelet gave a device of GPU {gpu:d} to the pod "{name:q}"'))
def kubelet_gave(scene: Scene, node: str, gpu: int, name: str) -> None:
    status = simulated_status()
    for device in status["devices"]:
        device["kubeletPods"] = [scene.pod(name)] if device["id"] == gpu else []
    publish(scene.world.cluster.kubeconfig, {node: status})
    scene.undo.callback(publish, scene.world.cluster.kubeconfig, {node: simulated_status()})


@then(step('/api/state flags {node} GPU {gpu:d} "kubelet-disagrees", naming the pod "{name:q}"'))
def state_flags_kubelet(scene: Scene, node: str, gpu: int, name: str) -> None:
    def flagged() -> None:
        g = state_gpu(scene.state(), node, gpu)
        assert g["kubeletPods"] == [scene.pod(name)], g
        flags = [f for f in g.get("flags") or [] if f.get("kind") == "kubelet-disagrees"]
        assert flags and flags[0]["severity"] == "error" and scene.pod(name) in flags[0]["message"], g

    eventually(f"{node} GPU {gpu} flagged kubelet-disagrees in /api/state", flagged)


@then("/api/state shows that the kubelet gave node4's GPU 3 to pods 3 and 4, and flags none of the five pods' GPUs")
def state_kubelet_agrees(scene: Scene, statefulset: StatefulSet) -> None:
    pods = [f"{statefulset.namespace}/{statefulset.pod(i)}" for i in range(5)]

    def agrees() -> None:
        state = scene.state()
        assert state_gpu(state, "node4", 3)["kubeletPods"] == pods[3:], state_gpu(state, "node4", 3)
        for node in ("node1", "node2", "node3", "node4"):
            for g in state["nodes"][node]["gpus"]:
                if {h["pod"] for h in g["holders"]} & set(pods):
                    assert g["kubeletPods"], f"{node} GPU {g['id']}: no kubelet view"
                    assert not g["flags"], f"{node} GPU {g['id']}: {g['flags']}"

    # The agent publishes the kubelet's view every few seconds.
    eventually("the kubelet's view on the board, agreeing", agrees, timeout=60)
