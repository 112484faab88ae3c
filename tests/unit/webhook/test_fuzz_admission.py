"""Property-based fuzz of everything a pod or a caller can send: the map grammar, what a pod asks for, and whole
AdmissionReviews. Properties: nothing raises but the documented error types (gpumap.MapError / PodMapError,
admission.BadRequest); messages and answers stay bounded (a denial's message below MESSAGE_BOUND, an encoded
answer at most 64 KiB) however large the input; the webhook and the scheduler agree on every pod; and the work
is linear, measured by counters and output sizes, never by a clock.

10,000 maps (8,000 built from seeds, 300 from composed strategies, 1,700 free texts) and 10,000 AdmissionReviews
(8,000 from seeds, 300 from composed strategies, 1,700 mangled bodies) per run, plus 200 pods fed to the scheduler
alone and a few hundred large inputs; derandomized (the same examples every run, no example database).
"""

from __future__ import annotations

import base64
import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_scheduling import admission, constants, gpumap, patches, podrequest
from gpu_scheduling.scheduler import decision, fit

MESSAGE_BOUND = 8 * 1024
"""No message built from user text is longer than this (a denial, a BadRequest, an Unschedulable reason)."""

FUZZ = settings.get_profile("fuzz")  # tests/conftest.py

# ---- strategies ------------------------------------------------------------------------------------------------

HOSTILE_CHARS = [
    "\u00a0",
    "\u2028",
    "\u2029",
    "\u200b",
    "\u3000",
    "\ufeff",
    "\u0085",
    "\x00",
    "\x0b",
    "\x0c",
    "\x1b",
    "\x7f",
    "\ud800",
    "\uff10",
    "é",
    "\U0001f600",
]
spaces = st.sampled_from(["", "", "", " ", "\t", "  ", *HOSTILE_CHARS])
numbers = st.one_of(
    st.integers(min_value=0, max_value=12).map(str),
    st.integers(min_value=0, max_value=10**12).map(str),
    st.text(alphabet="0123456789-+x ", max_size=12),
    st.sampled_from(
        ["", "-1", "1e3", "0x1", "\u0661", "9" * 5000, "0" * 10, "999999999", "1000000000", "9999", "10000"]
    ),
)
node_names = st.one_of(
    st.sampled_from(["node1", "node2", "n", "a.b", "Node_3", "-x", "x-", "a" * 254, ".".join(["a" * 63] * 4), ""]),
    st.from_regex(r"\A[a-z0-9][a-z0-9.-]{0,20}\Z"),
    st.text(max_size=10),
)
gpu_id_lists = st.lists(st.tuples(spaces, numbers, spaces), max_size=6).map(
    lambda items: ",".join(f"{a}{n}{b}" for a, n, b in items)
)
map_lines = st.one_of(
    st.tuples(
        spaces,
        numbers,
        spaces,
        st.sampled_from(["=", "=", "=", "", "=="]),
        spaces,
        node_names,
        spaces,
        st.sampled_from([":", ":", ":", "", "::"]),
        spaces,
        gpu_id_lists,
        spaces,
    ).map("".join),
    st.text(max_size=40),
    st.just(""),
)
map_texts = st.tuples(st.lists(map_lines, max_size=25), st.sampled_from(["\n", "\r\n", "\r", "\n\n"])).map(
    lambda t: t[1].join(t[0])
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def sometimes(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a plausible value, sometimes any JSON at all."""
    return st.one_of(valid, valid, valid, json_values)


claim_names = st.one_of(
    st.sampled_from(["train", " train ", "", "  ", "Train", "a_b", "a" * 254, "a.b-c", "x\n"]), st.text(max_size=12)
)
pod_names = st.one_of(
    st.sampled_from(["check-0", "check-3", "web-12", "loner", "", "x-" + "1" * 5000, "a\n-1"]), st.text(max_size=12)
)
env_entries = sometimes(
    st.fixed_dictionaries(
        {"name": sometimes(st.sampled_from(["CUDA_VISIBLE_DEVICES", "A", "B"]))},
        optional={
            "value": sometimes(st.sampled_from(["0", "0,1", "3"])),
            "valueFrom": st.just({"fieldRef": {"fieldPath": "metadata.name"}}),
        },
    )
)
containers = sometimes(
    st.fixed_dictionaries(
        {},
        optional={
            "name": sometimes(st.sampled_from(["c", "main", "init"])),
            "env": sometimes(st.lists(env_entries, max_size=4)),
        },
    )
)
container_lists = sometimes(st.lists(containers, max_size=4))
annotations = sometimes(
    st.fixed_dictionaries(
        {},
        optional={
            "gpu-scheduling-map": sometimes(st.one_of(map_texts, st.just("0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n"))),
            "gpu.scheduling/claim": sometimes(claim_names),
            constants.LWS_SIZE_ANNOTATION: sometimes(numbers),
            constants.JOB_COMPLETION_INDEX_KEY: sometimes(numbers),
            "other": st.text(max_size=5),
        },
    )
)
# Every key an index is read from (gpumap.pod_index), so their order and their errors are fuzzed too.
INDEX_LABELS = (
    constants.POD_INDEX_LABEL,
    constants.JOB_COMPLETION_INDEX_KEY,
    constants.JOBSET_GLOBAL_INDEX_LABEL,
    constants.JOBSET_GLOBAL_REPLICAS_LABEL,
    constants.LWS_WORKER_INDEX_LABEL,
    constants.LWS_GROUP_INDEX_LABEL,
    constants.TRAINING_REPLICA_INDEX_LABEL,
)
labels = sometimes(
    st.fixed_dictionaries(
        {}, optional={**{key: sometimes(numbers) for key in INDEX_LABELS}, "app": st.text(max_size=5)}
    )
)
metadata = sometimes(
    st.fixed_dictionaries(
        {},
        optional={
            "name": sometimes(pod_names),
            "generateName": sometimes(st.just("job-")),
            "namespace": sometimes(st.just("ns")),
            "annotations": annotations,
            "labels": labels,
        },
    )
)
specs = sometimes(
    st.fixed_dictionaries({}, optional={"containers": container_lists, "initContainers": container_lists})
)
pods = sometimes(st.fixed_dictionaries({}, optional={"metadata": metadata, "spec": specs}))
kinds = sometimes(
    st.sampled_from(
        [
            {"group": "", "version": "v1", "kind": "Pod"},
            {"group": "", "version": "v1", "kind": "ConfigMap"},
            {"group": "apps", "version": "v1", "kind": "Pod"},
        ]
    )
)
requests = sometimes(
    st.fixed_dictionaries(
        {"uid": sometimes(st.sampled_from(["u-1", "0b5e4d9e-0000", "", "u" * 257, "u\n"]))},
        optional={
            "kind": kinds,
            "operation": sometimes(st.sampled_from(["CREATE", "CREATE", "UPDATE", "DELETE"])),
            "namespace": sometimes(st.just("default")),
            "name": sometimes(pod_names),
            "object": pods,
        },
    )
)
reviews = sometimes(
    st.fixed_dictionaries(
        {"apiVersion": sometimes(st.just("admission.k8s.io/v1")), "kind": sometimes(st.just("AdmissionReview"))},
        optional={"request": requests},
    )
)


# ---- the same shapes from a seed: cheap enough for thousands of examples per run ------------------------------
# Hypothesis draws one 64-bit seed per example (so a failure is reproduced by its seed), and a plain random.Random
# builds the input from it in microseconds, where composing the strategies above costs milliseconds per example.


class Gen:
    SPACES = ("", "", "", "", " ", "\t", "  ", *HOSTILE_CHARS)
    NUMBERS = (
        "0",
        "1",
        "3",
        "12",
        "",
        "-1",
        "1e3",
        "0x1",
        "\u0661",
        "9" * 5000,
        "0" * 10,
        "999999999",
        "1000000000",
        "9999",
        "10000",
        " 1",
        "+1",
    )
    NODES = (
        "node1",
        "node2",
        "n",
        "a.b",
        "Node_3",
        "-x",
        "x-",
        "a" * 254,
        ".".join(["a" * 63] * 4),
        "",
        "node1 x",
        "a..b",
        "n\u00a0",
    )
    CLAIMS = ("train", " train ", "", "  ", "Train", "a_b", "a" * 254, "a.b-c", "x\n", None, 3, ["a"])
    NAMES = ("check-0", "check-3", "web-12", "loner", "", "x-" + "1" * 5000, "a\n-1", None, 5, ["x-1"])

    def __init__(self, seed: int):
        self.r = r = random.Random(seed)
        # How hostile this example is: most are nearly valid, so that the deep paths are reached too.
        self.p_valid = r.choice([0.99, 0.97, 0.9, 0.75])
        self.p_odd = r.choice([0.0, 0.0, 0.01, 0.05, 0.2])  # an odd space, number or node name

    def text(self, n: int = 12) -> str:
        r = self.r
        return "".join(
            chr(r.choice([r.randrange(32, 127), r.randrange(0, 0x3000), r.randrange(0, 0x110000)]))
            for _ in range(r.randrange(n + 1))
        )

    def json(self, depth: int = 0):
        r = self.r
        k = r.randrange(7 if depth < 3 else 5)
        return (
            (
                None,
                lambda: r.random() < 0.5,
                lambda: r.randrange(-(10**6), 10**6),
                lambda: r.random() * 1e6,
                self.text,
                lambda: [self.json(depth + 1) for _ in range(r.randrange(3))],
                lambda: {self.text(6): self.json(depth + 1) for _ in range(r.randrange(3))},
            )[k]()
            if k
            else None
        )

    def sometimes(self, make):
        return make() if self.r.random() < self.p_valid else self.json()

    def number(self) -> str:
        r = self.r
        if r.random() >= self.p_odd:
            return str(r.randrange(13))
        return r.choice(
            [
                str(r.randrange(10**12)),
                r.choice(self.NUMBERS),
                "".join(r.choice("0123456789-+x ") for _ in range(r.randrange(12))),
            ]
        )

    def sp(self) -> str:
        return self.r.choice(self.SPACES) if self.r.random() < self.p_odd else self.r.choice(["", "", " ", "\t"])

    def map_line(self, i: int) -> str:
        r = self.r
        k = r.random()
        if k < self.p_odd:
            return self.text(40)
        if k < 0.05:
            return ""
        ids = ",".join(self.sp() + self.number() + self.sp() for _ in range(r.randrange(1 if self.p_odd else 0, 7)))
        node = (
            f"node{r.randrange(5)}"
            if r.random() >= self.p_odd
            else r.choice(self.NODES)
            if r.random() < 0.7
            else self.text(10)
        )
        odd = r.random() < self.p_odd
        index = str(i) if r.random() >= self.p_odd else self.number()
        return "".join(
            [
                self.sp(),
                index,
                self.sp(),
                r.choice(["=", "", "=="]) if odd else "=",
                self.sp(),
                node,
                self.sp(),
                r.choice([":", "", "::"]) if odd else ":",
                self.sp(),
                ids,
                self.sp(),
            ]
        )

    def map_text(self) -> str:
        return self.r.choice(["\n", "\r\n", "\r", "\n\n"]).join(self.map_line(i) for i in range(self.r.randrange(26)))

    def env(self) -> list:
        r = self.r
        return [
            self.sometimes(
                lambda: {
                    k: v
                    for k, v in (
                        ("name", self.sometimes(lambda: r.choice(["CUDA_VISIBLE_DEVICES", "A", "B"]))),
                        ("value", self.sometimes(lambda: r.choice(["0", "0,1", "3"]))),
                        ("valueFrom", {"fieldRef": {"fieldPath": "metadata.name"}}),
                    )
                    if r.random() < 0.6
                }
            )
            for _ in range(r.randrange(5))
        ]

    def containers(self) -> list:
        r = self.r
        return [
            self.sometimes(
                lambda: {
                    k: v
                    for k, v in (
                        ("name", self.sometimes(lambda: r.choice(["c", "main", "init"]))),
                        ("env", self.sometimes(self.env)),
                    )
                    if r.random() < 0.7
                }
            )
            for _ in range(r.randrange(1, 5))
        ]

    def pod(self) -> dict:
        r = self.r
        notes: dict = {}
        if r.random() < 0.7:
            notes["gpu-scheduling-map"] = self.sometimes(
                lambda: self.map_text() if r.random() < 0.6 else "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n"
            )
        if r.random() < (0.3 if not notes else self.p_odd):
            notes["gpu.scheduling/claim"] = self.sometimes(lambda: self.odd("train", *self.CLAIMS))
        meta = {
            k: v
            for k, v in (
                ("name", self.sometimes(lambda: self.odd(f"check-{r.randrange(6)}", *self.NAMES))),
                ("generateName", "job-"),
                ("annotations", self.sometimes(lambda: notes)),
                ("labels", self.sometimes(lambda: {"apps.kubernetes.io/pod-index": self.sometimes(self.number)})),
            )
            if r.random() < (0.95 if k != "labels" else 0.3)
        }
        spec = {k: self.sometimes(self.containers) for k in ("containers", "initContainers") if r.random() < 0.7}
        return {
            k: v
            for k, v in (("metadata", self.sometimes(lambda: meta)), ("spec", self.sometimes(lambda: spec)))
            if r.random() < 0.9
        }

    def odd(self, usual, *odd):
        return self.r.choice(odd) if self.r.random() < self.p_odd else usual

    def keep(self, items) -> dict:
        """The items, each dropped with the example's odd-probability."""
        return {k: v for k, v in items if self.r.random() >= self.p_odd / 2}

    def review(self) -> object:
        r = self.r
        pod_kind = {"group": "", "version": "v1", "kind": "Pod"}
        request = self.keep(
            (
                ("uid", self.sometimes(lambda: self.odd(f"u-{r.randrange(10**6)}", "", "u" * 257, "u\n", "\u00e9"))),
                (
                    "kind",
                    self.sometimes(
                        lambda: self.odd(
                            pod_kind,
                            {"group": "", "version": "v1", "kind": "ConfigMap"},
                            {"group": "apps", "version": "v1", "kind": "Pod"},
                            {"group": None, "kind": "Pod"},
                        )
                    ),
                ),
                ("operation", self.sometimes(lambda: self.odd("CREATE", "UPDATE", "DELETE", "CONNECT"))),
                ("namespace", self.sometimes(lambda: "default")),
                ("name", self.sometimes(lambda: self.odd("check-0", *self.NAMES))),
                ("object", self.sometimes(self.pod)),
            )
        )
        return self.odd(
            self.keep(
                (
                    ("apiVersion", self.odd("admission.k8s.io/v1", "admission.k8s.io/v1beta1", None, 1)),
                    ("kind", self.odd("AdmissionReview", "Pod", None, [])),
                    ("request", self.sometimes(lambda: request)),
                )
            ),
            self.json(),
            self.json(),
        )


seeds = st.integers(min_value=0, max_value=2**64 - 1)


# ---- checks ----------------------------------------------------------------------------------------------------


def assert_safe_message(message: str) -> None:
    assert len(message) <= MESSAGE_BOUND, len(message)
    assert all(ch == "…" or " " <= ch <= "~" for ch in message), ascii(message[:200])


def check_map(text: str) -> None:
    try:
        parsed = gpumap.parse(text)
    except gpumap.MapError as exc:
        assert 1 <= len(exc.problems) <= gpumap.MAX_PROBLEMS and exc.total >= len(exc.problems)
        assert all(p.line >= 1 for p in exc.problems)
        assert_safe_message(str(exc))
        return
    assert len(parsed) >= 1
    assert gpumap.parse(gpumap.encode(parsed)) == parsed
    for e in parsed.entries.values():
        assert 0 <= e.index < 10**gpumap.MAX_INDEX_DIGITS and all(
            0 <= i < 10**gpumap.MAX_GPU_ID_DIGITS for i in e.gpu_ids
        )
        assert e.node.isascii()


def ready_node(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"pods": "110"}},
    }


def check_pod(pod: object) -> None:
    """The scheduler's side: reading it never raises but PodMapError, decide never raises."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    try:
        podrequest.read(meta)
    except gpumap.PodMapError as exc:
        assert_safe_message(str(exc))
    try:
        podrequest.claim_name(meta)
    except gpumap.PodMapError as exc:
        assert_safe_message(str(exc))
    verdict = decision.decide(pod, {}, False, fit.NodeUsage())
    decision.is_claim_pod(pod if isinstance(pod, dict) else {})
    if isinstance(verdict, decision.Unschedulable):
        assert_safe_message(verdict.message)


def check_body(body: bytes) -> None:
    try:
        request = admission.parse_review(body)
    except admission.BadRequest as exc:
        assert_safe_message(str(exc))
        return
    review = admission.review_pod(request)
    data = admission.encode_review(review)
    assert len(data) <= admission.MAX_RESPONSE_BYTES
    response = json.loads(data)["response"]
    assert response["uid"] == request["uid"]
    if not response["allowed"]:
        assert_safe_message(response["status"]["message"])
    pod = request.get("object")
    if not isinstance(pod, dict):
        return
    check_pod(pod)
    kind = request["kind"]
    if kind.get("kind") != "Pod" or kind.get("group", "") != "" or request["operation"] != "CREATE":
        return
    # The webhook and the scheduler never disagree about a map pod.
    try:
        asked = podrequest.read(pod.get("metadata"))
    except gpumap.PodMapError:
        asked = None
        assert not response["allowed"]
    if isinstance(asked, podrequest.MapRequest):
        if response["allowed"]:
            ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
            admitted = patches.apply(pod, ops)
            verdict = decision.decide(
                admitted, {asked.entry.node: ready_node(asked.entry.node)}, False, fit.NodeUsage()
            )
            assert isinstance(verdict, decision.Bind), verdict
        else:
            assert isinstance(
                decision.decide(pod, {asked.entry.node: ready_node(asked.entry.node)}, False, fit.NodeUsage()),
                decision.Unschedulable,
            )


# ---- 10,000 maps -----------------------------------------------------------------------------------------------
# Hypothesis' own bookkeeping costs about a millisecond per example on a slow machine, so the seeded tests check a
# batch of inputs per example: 1,000 examples x 8 maps, 300 composed maps, 1,700 free texts.

BATCH = 8


@settings(FUZZ, max_examples=1000)
@given(seeds)
def test_fuzz_maps_from_seeds(seed):
    gen = Gen(seed)
    for _ in range(BATCH):
        check_map(gen.map_text())


@settings(FUZZ, max_examples=300)
@given(map_texts)
def test_fuzz_structured_maps(text):
    check_map(text)


@settings(FUZZ, max_examples=1700)
@given(st.text(max_size=200))
def test_fuzz_free_text_maps(text):
    check_map(text)


# ---- 10,000 AdmissionReviews -----------------------------------------------------------------------------------
# 1,000 examples x 8 reviews from a seed, 300 composed reviews, 425 examples x 4 mangled bodies.


@settings(FUZZ, max_examples=1000)
@given(seeds)
def test_fuzz_reviews_from_seeds(seed):
    gen = Gen(seed)
    for _ in range(BATCH):
        check_body(json.dumps(gen.review()).encode())


@settings(FUZZ, max_examples=300)
@given(reviews)
def test_fuzz_structured_reviews(review):
    check_body(json.dumps(review).encode())


@settings(FUZZ, max_examples=425)
@given(seeds, st.binary(max_size=8))
def test_fuzz_mangled_bodies(seed, junk):
    gen = Gen(seed)
    for _ in range(4):
        body = json.dumps(gen.review()).encode()
        cut = gen.r.randrange(len(body) + 1)
        check_body(body[:cut] + junk + body[cut + gen.r.randrange(3) :])


@settings(FUZZ, max_examples=200)
@given(pods)
def test_fuzz_pods_as_the_scheduler_sees_them(pod):
    check_pod(pod)


# ---- bounded as the input grows (sizes and counters, not time) -------------------------------------------------

bad_lines = st.sampled_from(
    [
        "x" * 100,
        "0=Node_1:0",
        "a=b:c",
        "0=n:" + ",".join("x" * 5),
        "9" * 300 + "=n:0",
        "0=n\u00a0:0",
        "\x00" * 50,
        "0=n:0",
    ]
)


@settings(FUZZ, max_examples=150)
@given(bad_lines, st.integers(min_value=1, max_value=3000))
def test_map_message_is_bounded_whatever_the_number_of_bad_lines(line, n):
    text = "\n".join(f"{i}{line}" for i in range(n))
    try:
        gpumap.parse(text)
    except gpumap.MapError as exc:
        # A constant bound independent of n: 10 problems of at most ~120 shown characters and ~300 of reason.
        assert len(str(exc)) <= gpumap.MAX_PROBLEMS * 450 + 100
        assert len(exc.problems) <= gpumap.MAX_PROBLEMS
        assert sum(len(p.text) + len(p.reason) for p in exc.problems) <= gpumap.MAX_PROBLEMS * 500


@settings(FUZZ, max_examples=100)
@given(st.integers(min_value=1, max_value=2000), st.integers(min_value=1, max_value=2000))
def test_parse_looks_at_each_line_once(n_good, n_bad):
    # Work measured by a counter: _parse_line runs once per non-blank ASCII line, whatever the mix.
    calls = 0
    original = gpumap._parse_line

    def counting(*args):
        nonlocal calls
        calls += 1
        return original(*args)

    lines = [f"{i}=n:0" for i in range(n_good)] + ["x" * 50] * n_bad
    gpumap._parse_line = counting
    try:
        try:
            gpumap.parse("\n".join(lines))
        except gpumap.MapError as exc:
            assert exc.total == n_bad
    finally:
        gpumap._parse_line = original
    assert calls == n_good + n_bad


@settings(FUZZ, max_examples=30)
@given(st.integers(min_value=0, max_value=5000), st.integers(min_value=0, max_value=4))
def test_review_answer_is_bounded_whatever_the_number_of_containers(n, env_per_container):
    env = [{"name": "CUDA_VISIBLE_DEVICES", "value": "9"}] * env_per_container
    pod = {
        "metadata": {"name": "check-0", "annotations": {"gpu-scheduling-map": "0=node1:0,1"}},
        "spec": {"containers": [{"name": f"c{i}", "env": env} for i in range(n)]},
    }
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "object": pod,
            },
        }
    )
    review = admission.review_pod(admission.parse_review(body.encode()))
    assert len(admission.encode_review(review)) <= admission.MAX_RESPONSE_BYTES
    ops = patches.cuda_patch(pod, "0,1")
    assert len(ops) == n * max(env_per_container, 1)  # one operation per container and duplicate: linear


@settings(FUZZ, max_examples=40)
@given(st.integers(min_value=1, max_value=200_000))
def test_deep_nesting_is_a_bad_request(depth):
    for body in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"0" + b"}" * depth):
        try:
            admission.parse_review(body)
        except admission.BadRequest as exc:
            assert_safe_message(str(exc))
