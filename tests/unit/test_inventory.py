"""The inventory agent's pure parts: simulated declarations, NVLink islands, the status it writes."""

import pytest

from gpu_scheduling.agent import inventory
from gpu_scheduling.claims import objects


def test_the_reference_example_node():
    devices = inventory.parse_simulated("count=8,islands=2,bandwidth=600/64,unhealthy=7")
    assert [(d["id"], d["island"], d["bandwidthGBps"], d["health"]) for d in devices] == [
        (0, "nvlink-group-0", 600, "Healthy"), (1, "nvlink-group-0", 600, "Healthy"),
        (2, "nvlink-group-0", 600, "Healthy"), (3, "nvlink-group-0", 600, "Healthy"),
        (4, "nvlink-group-1", 64, "Healthy"), (5, "nvlink-group-1", 64, "Healthy"),
        (6, "nvlink-group-1", 64, "Healthy"), (7, "nvlink-group-1", 0, "Unhealthy")]


@pytest.mark.parametrize("text, fragment", [
    ("count=8,colour=red", "expected count=N"),
    ("count=eight", "expected integers"),
    ("count=2,bandwidth=", "at least one bandwidth"),
])
def test_bad_declarations_say_what_was_expected(text, fragment):
    with pytest.raises(inventory.InventoryError, match=fragment):
        inventory.parse_simulated(text)


def test_islands_are_connected_components():
    assert inventory.islands_from_links(6, [(0, 1), (1, 2), (4, 5)]) == {0: 0, 1: 0, 2: 0, 3: 1, 4: 2, 5: 2}
    assert inventory.islands_from_links(1, []) == {0: 0}


def test_status_counts_and_in_use_by_follow_leases_and_map_pods():
    devices = inventory.parse_simulated("count=4,islands=1,bandwidth=600,unhealthy=3")
    leases = [objects.lease_body("n1", 0, "Exclusive", {"u1": "ns/p1"}),
              objects.lease_body("n1", 1, "Shared", {"u2": "ns/p2", "u3": ""})]
    pods = [{"metadata": {"uid": "m", "namespace": "default", "name": "check-2",
                          "annotations": {"gpu-scheduling-map": "2=n1:1,2"}},
             "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
            {"metadata": {"uid": "f", "namespace": "default", "name": "done-0",
                          "annotations": {"gpu-scheduling-map": "0=n1:2"}},
             "spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}}]
    status = inventory.node_status(devices, leases, pods)
    assert (status["total"], status["free"], status["unhealthy"]) == (4, 0, 1)
    assert [d["inUseBy"] for d in status["devices"]] == [["ns/p1"], ["default/check-2", "ns/p2", "u3"],
                                                         ["default/check-2"], []]


@pytest.mark.parametrize("spec, node", [
    ({"nodeName": "node1"}, "node1"),
    ({}, "node1"),
    ({"nodeName": "node2"}, None),  # names another node: the scheduler ignores it
])
def test_an_inventory_describes_only_the_node_of_its_own_name(spec, node):
    status = {"metadata": {"name": "node1"}, "spec": spec, "status": {"devices": [{"id": 0}]}}
    assert objects.inventory_node(status) == node
    assert objects.node_from_status(status, {}).name == "node1"
