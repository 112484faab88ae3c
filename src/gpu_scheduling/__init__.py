"""GPU scheduling for Kubernetes: a map-driven scheduler, a CUDA_VISIBLE_DEVICES webhook and a check service.

Layers import only downward:

    cli entry points (scheduler.main, webhook.main, check)
        -> scheduler.*, webhook.*           (talk to Kubernetes / serve HTTP)
        -> kube.*                            (thin asyncio Kubernetes client)
        -> gpumap, patches, admission, decision, constants   (pure: no I/O, no Kubernetes client)
"""

__version__ = "0.1.0"
