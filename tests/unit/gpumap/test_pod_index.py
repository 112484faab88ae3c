"""A pod's index from its workload controller's labels (gpumap.pod_index): each rule, their order when a pod carries
several, each error, and that the webhook's reading (podrequest.read) and the scheduler's (gpumap.entry_for_pod)
agree on any metadata."""

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpu_scheduling import constants, gpumap, podrequest

LWS_WORKER = constants.LWS_WORKER_INDEX_LABEL
LWS_GROUP = constants.LWS_GROUP_INDEX_LABEL
LWS_SIZE = constants.LWS_SIZE_ANNOTATION
JOBSET_INDEX = constants.JOBSET_GLOBAL_INDEX_LABEL
JOBSET_REPLICAS = constants.JOBSET_GLOBAL_REPLICAS_LABEL
TRAINING = constants.TRAINING_REPLICA_INDEX_LABEL
COMPLETION = constants.JOB_COMPLETION_INDEX_KEY
STS = constants.POD_INDEX_LABEL


def meta(name: str = "", labels: dict | None = None, annotations: dict | None = None) -> dict:
    out: dict = {"name": name} if name else {"generateName": "w-"}
    if labels is not None:
        out["labels"] = labels
    if annotations is not None:
        out["annotations"] = annotations
    return out


@pytest.mark.parametrize(
    "metadata, index",
    [
        # 1. LeaderWorkerSet: group × size + worker; group 0 needs no size.
        (meta("lws-0-2", {LWS_WORKER: "2", LWS_GROUP: "0"}), 2),
        (meta("lws-1", {LWS_WORKER: "0", LWS_GROUP: "1"}, {LWS_SIZE: "4"}), 4),
        (meta("lws-1-3", {LWS_WORKER: "3", LWS_GROUP: "1"}, {LWS_SIZE: "4"}), 7),
        (meta("lws-0-1", {LWS_WORKER: "1"}), 1),
        (meta("lws-2-1", {LWS_WORKER: "1", LWS_GROUP: "2"}, {LWS_SIZE: "3"}), 7),
        # 2. JobSet: the child Job's global index (one pod per child Job) ...
        (meta("js-workers-2-0-abcde", {JOBSET_INDEX: "5", COMPLETION: "0", JOBSET_REPLICAS: "8"}), 5),
        (meta("js-workers-2-0-abcde", {JOBSET_INDEX: "5"}), 5),
        # ... or the completion index when the JobSet has a single child Job.
        (meta("js-workers-0-3-abcde", {JOBSET_INDEX: "0", COMPLETION: "3", JOBSET_REPLICAS: "1"}), 3),
        (meta("js-workers-0-3-abcde", {JOBSET_INDEX: "0", JOBSET_REPLICAS: "1"}, {COMPLETION: "3"}), 3),
        (meta("js-workers-0-abcde", {JOBSET_INDEX: "0", JOBSET_REPLICAS: "1"}), 0),
        # 3. Kubeflow training operator.
        (meta("pt-worker-3", {TRAINING: "3", "training.kubeflow.org/replica-type": "worker"}), 3),
        # 4. Indexed Job: the label, else the annotation (Kubernetes < 1.28); never the name's random suffix.
        (meta("train-2-x7k4p", {COMPLETION: "2"}), 2),
        (meta("train-2-12345", {COMPLETION: "2"}), 2),
        (meta("train-2-12345", {}, {COMPLETION: "2"}), 2),
        (meta("train-2-12345", None, {COMPLETION: "2"}), 2),
        # 5. StatefulSet; 6. the name.
        (meta("web-9", {STS: "4"}), 4),
        (meta("web-9"), 9),
        (meta("web-9", {"app": "web"}, {"other": "1"}), 9),
    ],
)
def test_each_rule(metadata, index):
    assert gpumap.pod_index(metadata) == index


@pytest.mark.parametrize(
    "labels, annotations, index, why",
    [
        (
            {LWS_WORKER: "1", LWS_GROUP: "2", STS: "1", JOBSET_INDEX: "7", TRAINING: "8", COMPLETION: "9"},
            {LWS_SIZE: "3"},
            7,
            "LeaderWorkerSet before every other (its pods carry the StatefulSet label too)",
        ),
        ({JOBSET_INDEX: "6", COMPLETION: "0", STS: "1", TRAINING: "8"}, {}, 6, "JobSet before the Job and the rest"),
        ({TRAINING: "8", COMPLETION: "9", STS: "1"}, {COMPLETION: "5"}, 8, "training operator before the Job"),
        ({COMPLETION: "9", STS: "1"}, {COMPLETION: "5"}, 9, "the Job's label before its annotation"),
        ({STS: "1"}, {COMPLETION: "5"}, 5, "the Job's annotation before the StatefulSet label"),
        ({STS: "1"}, {}, 1, "the StatefulSet label before the name"),
    ],
)
def test_the_first_rule_present_decides(labels, annotations, index, why):
    assert gpumap.pod_index(meta("pod-3", labels, annotations)) == index, why


@pytest.mark.parametrize(
    "metadata, fragment",
    [
        (
            meta("lws-1-1", {LWS_WORKER: "1", LWS_GROUP: "1"}),
            f"label {LWS_GROUP}=1 needs the annotation {LWS_SIZE} (the group's size)",
        ),
        (
            meta("lws-1-4", {LWS_WORKER: "4", LWS_GROUP: "1"}, {LWS_SIZE: "4"}),
            f"label {LWS_WORKER}=4 is not below the annotation {LWS_SIZE}=4",
        ),
        (meta("lws", {LWS_WORKER: "1"}, {LWS_SIZE: "0"}), f"{LWS_WORKER}=1 is not below the annotation {LWS_SIZE}=0"),
        (
            meta("lws", {LWS_WORKER: "1", LWS_GROUP: "2"}, {LWS_SIZE: "500000000"}),
            "= 1000000001 is not below 10^9",
        ),
        (meta("lws", {LWS_WORKER: "one"}), f"label {LWS_WORKER}='one' is not a non-negative integer"),
        (meta("lws", {LWS_WORKER: "1", LWS_GROUP: 1}), f"label {LWS_GROUP} is a number; expected a string"),
        (
            meta("lws", {LWS_WORKER: "1", LWS_GROUP: "1"}, {LWS_SIZE: "-4"}),
            f"annotation {LWS_SIZE}='-4' is not a non-negative integer",
        ),
        (meta("lws", {LWS_WORKER: "1", LWS_GROUP: "1"}, ["x"]), "metadata.annotations is an array"),
        (
            meta("js-1-2-abcde", {JOBSET_INDEX: "1", COMPLETION: "2", JOBSET_REPLICAS: "4"}),
            (
                "a JobSet whose child Jobs run several pods each cannot be indexed unambiguously; run one pod per "
                "child Job"
            ),
        ),
        (meta("js", {JOBSET_INDEX: "1"}, {COMPLETION: "2"}), "cannot be indexed unambiguously"),
        (meta("js", {JOBSET_INDEX: "1", JOBSET_REPLICAS: "many"}), f"label {JOBSET_REPLICAS}='many' is not a"),
        (meta("js", {JOBSET_INDEX: "1" * 10}), f"label {JOBSET_INDEX}='1111111111' has 10 digits; at most 9"),
        (meta("pt", {TRAINING: ""}), f"label {TRAINING}='' is not a non-negative integer"),
        (meta("job-1-abc", {COMPLETION: "x"}), f"label {COMPLETION}='x' is not a non-negative integer"),
        (meta("job-1-abc", {}, {COMPLETION: 1}), f"annotation {COMPLETION} is a number; expected a string"),
        (meta("job-1-abc", {}, {COMPLETION: "7" * 5000}), "has 5000 digits; at most 9"),
        (meta("job-1-abc", {STS: "1"}, "notes"), "metadata.annotations is a string"),
        (
            meta("loner"),
            (
                "the pod carries none of the index labels (LeaderWorkerSet leaderworkerset.sigs.k8s.io/worker-index, "
                "JobSet jobset.sigs.k8s.io/job-global-index, training operator training.kubeflow.org/replica-index, "
                "Indexed Job batch.kubernetes.io/job-completion-index, StatefulSet apps.kubernetes.io/pod-index) and "
                "pod name 'loner' does not end in `-<number>`"
            ),
        ),
    ],
)
def test_each_error_names_the_key_and_what_was_expected(metadata, fragment):
    with pytest.raises(gpumap.PodIndexError) as info:
        gpumap.pod_index(metadata)
    message = str(info.value)
    assert fragment in message and len(message) < 1000 and "\n" not in message


def test_an_indexed_job_pod_is_not_read_by_its_name():
    """`<job>-<index>-<random>`: the name rule alone would take the random suffix's digits, or fail."""
    assert gpumap.pod_index(meta("train-1-83412", {COMPLETION: "1"})) == 1
    with pytest.raises(gpumap.PodIndexError):
        gpumap.pod_index(meta("train-1-x7k4p"))


def test_the_largest_leaderworkerset_index():
    labels = {LWS_WORKER: "1", LWS_GROUP: "499999999"}
    assert gpumap.pod_index(meta("lws", labels, {LWS_SIZE: "2"})) == 999_999_999


# ---- properties --------------------------------------------------------------------------------------------------

MAP = "".join(f"{i}=node{i % 4 + 1}:{i % 8}\n" for i in range(16))

index_text = st.integers(0, 17).map(str)
values = st.one_of(
    index_text,
    index_text,
    index_text,
    st.sampled_from(["", "x", "-1", "007", "1" * 10, "999999999", " 1", "1\n"]),
    st.integers(0, 3),
    st.none(),
    st.lists(st.just("1"), max_size=1),
)
keys = st.sampled_from([LWS_WORKER, LWS_GROUP, JOBSET_INDEX, JOBSET_REPLICAS, TRAINING, COMPLETION, STS, "app"])
sometimes_object = st.one_of(st.dictionaries(keys, values, max_size=5), st.none(), st.sampled_from(["x", 1, []]))
# A null map annotation is left out: read refuses it, entry_for_pod takes it as no map (the apiserver never serves
# one: annotations are strings).
notes = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            constants.MAP_ANNOTATION: st.one_of(st.just(MAP), st.sampled_from(["0=node1:0", "x", "", 1])),
            LWS_SIZE: values,
            COMPLETION: values,
            constants.CLAIM_ANNOTATION: st.sampled_from(["train", "", None, 1]),
            "other": values,
        },
    ),
    st.none(),
    st.sampled_from(["x", []]),
)
map_notes = st.fixed_dictionaries(
    {constants.MAP_ANNOTATION: st.just(MAP)}, optional={LWS_SIZE: values, COMPLETION: values}
)
names = st.one_of(st.sampled_from(["p-0", "p-3", "train-2-x7k4p", "train-2-123", "loner", ""]), st.text(max_size=8))
objects = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(names, st.none(), st.integers()),
        "generateName": st.just("w-"),
        "labels": sometimes_object,
        "annotations": st.one_of(map_notes, notes),
    },
)
# Pods that carry the map (most of them resolve an index), and any metadata object.
map_pods = st.fixed_dictionaries(
    {"name": names, "labels": st.dictionaries(keys, index_text, max_size=3), "annotations": map_notes}
)
metadatas = st.one_of(objects, st.none(), st.sampled_from([[], "meta", 3]))


@given(metadatas)
def test_pod_index_raises_only_pod_index_error(metadata):
    try:
        index = gpumap.pod_index(metadata)
    except gpumap.PodIndexError as exc:
        assert len(str(exc)) < 2000 and "\n" not in str(exc)
    else:
        assert 0 <= index < 10**9


def _outcome(read):
    try:
        return read()
    except gpumap.PodMapError:
        return "refused"


@settings(max_examples=300)
@given(st.one_of(map_pods, objects))
def test_the_webhook_and_the_scheduler_read_a_pod_alike(metadata):
    """podrequest.read (the webhook and the scheduler's decision) and gpumap.entry_for_pod (the scheduler's claim
    ledger) find the same entry, or both refuse the pod. (Metadata that is not an object never reaches
    entry_for_pod: the ledger reads only pods the apiserver served.)"""
    webhook = _outcome(lambda: podrequest.read(metadata))
    scheduler = _outcome(lambda: gpumap.entry_for_pod(metadata))
    event(f"webhook: {type(webhook).__name__ if webhook != 'refused' else webhook}")
    if isinstance(webhook, podrequest.MapRequest):
        assert scheduler == webhook.entry
    elif webhook is None:
        assert scheduler is None
    elif webhook == "refused":
        # read also refuses what entry_for_pod does not check (a bad claim, both annotations): only the reverse
        # must hold, and a map pod must fail alike.
        notes = metadata.get("annotations")
        if not isinstance(notes, dict) or constants.CLAIM_ANNOTATION not in notes:
            assert scheduler == "refused"
    else:  # a claim pod: no map entry to agree on
        assert isinstance(webhook, podrequest.ClaimRequest)
