"""Test harness: a real control plane (etcd, kube-apiserver, kube-controller-manager, kwok) on loopback, and the
project's programs run as real processes against it. Nothing here mocks Kubernetes."""
