"""A thin Kubernetes client: config loading, JSON requests and watches (`client`, asyncio; `sync`, its blocking
twin), an informer cache, a keyed work queue, leader election, and, pure, the API paths (`paths`), the error
hierarchy (`errors`) and the wire details both clients share (`wire`).

Deliberately small: objects stay plain dicts (no model classes), because the hot paths move thousands of pods
and deserialising them into models costs more than the scheduling itself.
"""
