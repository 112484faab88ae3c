"""What `kubectl gpu submit` accepts before it sends anything, and that generate-template's output is accepted."""

import pytest

from gpu_scheduling import constants
from gpu_scheduling.cli import documents, template

CLAIM = """apiVersion: gpu.scheduling/v1
kind: GpuClaim
metadata: {name: train}
spec: {devices: {count: 2}}
"""
POD = """apiVersion: v1
kind: Pod
metadata: {name: train-0, annotations: {gpu.scheduling/claim: train}}
spec:
  schedulerName: gpu-scheduler
  containers: [{name: main, image: cuda}]
"""


def check(text: str, namespace: str = "ns") -> list[documents.Document]:
    return documents.check(documents.load(text, "f.yaml"), namespace)


def problems(text: str) -> list[str]:
    with pytest.raises(documents.DocumentError) as info:
        check(text)
    return info.value.problems


def test_claims_come_first_and_take_the_namespace_given():
    docs = check(f"{POD}---\n{CLAIM}")
    assert [(d.index, d.kind, d.namespace, d.name) for d in docs] == [
        (2, "GpuClaim", "ns", "train"),
        (1, "Pod", "ns", "train-0"),
    ]
    assert docs[0].body["metadata"]["namespace"] == "ns", "the namespace is filled in for the apply"
    assert docs[1].claim == "train"
    assert documents.claims_to_look_up(docs) == {}


def test_a_documents_own_namespace_wins():
    docs = check(CLAIM.replace("{name: train}", "{name: train, namespace: team}"))
    assert docs[0].namespace == "team"


def test_a_pod_naming_a_claim_outside_the_file_must_be_looked_up():
    docs = check(POD)
    wanted = documents.claims_to_look_up(docs)
    assert list(wanted) == [("ns", "train")]
    assert documents.missing_claim(wanted[("ns", "train")]) == (
        "document 1 (Pod ns/train-0): metadata.annotations[gpu.scheduling/claim] names the GpuClaim 'train', "
        "which is neither in the input nor in namespace ns"
    )
    # The same claim in another namespace of the file does not count.
    other = CLAIM.replace("{name: train}", "{name: train, namespace: elsewhere}")
    assert list(documents.claims_to_look_up(check(f"{other}---\n{POD}"))) == [("ns", "train")]


def test_empty_documents_are_skipped_but_counted():
    # A leading --- starts the first document; the empty one between the two --- is document 2.
    docs = check(f"---\n{CLAIM}---\n---\n{POD}")
    assert [d.index for d in docs] == [1, 3]


def test_malformed_yaml_names_the_line():
    [problem] = problems("apiVersion: v1\nkind: Pod\n  metadata: [\n")
    assert problem.startswith("f.yaml: malformed YAML at line 3")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("- a\n- b\n", "document 1: not a mapping"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "document 1: kind is missing"),
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n", "document 1: kind Deployment is not accepted"),
        ("apiVersion: v1\nkind: List\nitems: []\n", "kind List is not accepted"),
        (CLAIM.replace("gpu.scheduling/v1", "gpu.scheduling/v2"), "apiVersion is 'gpu.scheduling/v2'"),
        (CLAIM.replace("metadata: {name: train}", "metadata: {generateName: t-}"), "metadata.generateName cannot"),
        (CLAIM.replace("metadata: {name: train}", "spec2: {}"), "document 1 (GpuClaim): metadata is missing"),
        (CLAIM.replace("{name: train}", "{name: Train_1}"), "metadata.name 'Train_1' is not a valid name"),
        (CLAIM.replace("{name: train}", "{name: t, namespace: A}"), "metadata.namespace 'A' is not a valid"),
        (CLAIM.replace("spec: {devices: {count: 2}}", "spec: {devices: {}}"), "spec.devices.count is missing"),
        (CLAIM.replace("spec: {devices: {count: 2}}", ""), "document 1 (GpuClaim ns/train): spec is missing"),
        (POD.replace("schedulerName: gpu-scheduler", "schedulerName: default-scheduler"), "spec.schedulerName is"),
        (POD.replace("  schedulerName: gpu-scheduler\n", ""), "spec.schedulerName is unset (the default scheduler)"),
        (POD.replace("{gpu.scheduling/claim: train}", "{gpu.scheduling/claim: ''}"), "gpu.scheduling/claim] is empty"),
        (POD.replace("{gpu.scheduling/claim: train}", "{a: b}"), "names no GpuClaim (gpu.scheduling/claim)"),
        (
            POD.replace("{gpu.scheduling/claim: train}", "{gpu.scheduling/claim: t, gpu-scheduling-map: '0=n:0'}"),
            "both",
        ),
        (
            POD.replace("{gpu.scheduling/claim: train}", "{gpu.scheduling/claim: t, gpu.scheduling/allocated: 'n:0'}"),
            "metadata.annotations[gpu.scheduling/allocated] is written by the scheduler",
        ),
        (POD.replace("{gpu.scheduling/claim: train}", "{gpu.scheduling/claim: 5}"), "must map names to strings"),
        (POD.replace("  containers: [{name: main, image: cuda}]\n", ""), "spec.containers is missing"),
        (POD + "  nodeName: node1\n", "spec.nodeName is set"),
        ("", "no documents"),
    ],
)
def test_refusals_name_the_document_and_the_field(text, fragment):
    found = problems(text)
    assert any(fragment in p for p in found), found


def test_every_problem_is_reported_with_its_document_number():
    found = problems(f"{CLAIM}---\nkind: Secret\n---\n{POD.replace('schedulerName: gpu-scheduler', 'x: y')}")
    assert [p.split(":")[0].split(" (")[0] for p in found] == ["document 2", "document 3"]


def test_the_same_object_twice_is_refused():
    [problem] = problems(f"{CLAIM}---\n{CLAIM}")
    assert problem == "document 2 (GpuClaim ns/train): metadata.name is the same as document 1's"


def test_a_map_pod_is_accepted_without_a_claim():
    text = POD.replace("{gpu.scheduling/claim: train}", "{gpu-scheduling-map: '0=node1:0'}")
    [doc] = check(text)
    assert doc.claim is None and documents.claims_to_look_up([doc]) == {}


@pytest.mark.parametrize("strategy", [None, "RoundRobin"])
@pytest.mark.parametrize("policy", template.POLICIES)
def test_generated_template_is_accepted_as_it_is(strategy, policy):
    text = template.render("train", 4, strategy, policy, "registry.example/cuda:12")
    claim, pod = check(text, "team")
    assert (claim.kind, claim.name, pod.kind, pod.name, pod.claim) == ("GpuClaim", "train", "Pod", "train", "train")
    assert claim.body["spec"]["devices"] == {"count": 4, "policy": policy, "exclusivity": "Exclusive"}
    assert claim.body["spec"].get("strategy") == strategy
    assert pod.body["spec"]["schedulerName"] == constants.DEFAULT_SCHEDULER_NAME
    assert pod.body["spec"]["containers"][0]["image"] == "registry.example/cuda:12"
    assert documents.claims_to_look_up([claim, pod]) == {}
    assert text.count("#") >= 10, "the template explains its fields"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"name": "Bad_Name"}, "--name 'Bad_Name'"),
        ({"gpus": 0}, "--gpus must be at least 1"),
        ({"strategy": "Fastest"}, "--strategy 'Fastest'"),
        ({"policy": "preferIds"}, "--policy 'preferIds'"),
        ({"image": "two words"}, "--image 'two words'"),
    ],
)
def test_template_refuses_what_the_api_would(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        template.render(**kwargs)
