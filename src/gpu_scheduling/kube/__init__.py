"""A thin asyncio Kubernetes client: config loading, JSON requests, watches and an informer cache.

Deliberately small: objects stay plain dicts (no model classes), because the hot paths move thousands of pods
and deserialising them into models costs more than the scheduling itself.
"""
