"""Bind every feature to the real control-plane tier (etcd + kube-apiserver + kube-controller-manager + kwok)."""

from pytest_bdd import scenarios

scenarios(".")
