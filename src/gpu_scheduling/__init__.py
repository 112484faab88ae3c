"""GPU scheduling for Kubernetes: a map-driven scheduler, a CUDA_VISIBLE_DEVICES webhook, a GPU inventory agent, a
check service, the `kubectl gpu` plugin and a live GPU board.

Layers import only downward (checked by `lint-imports`, contracts in pyproject.toml):

    programs, independent of each other:  scheduler, webhook, agent, check, cli, board
        -> kube.client, informer, leaderelection, workqueue, sync, config; health   (network and files)
        -> admission, patches, podrequest, gpumap, claims, logs, kube.paths, kube.errors, kube.wire   (pure)
        -> constants

The pure modules (and scheduler.decision, scheduler.metrics, agent.inventory, agent.metrics, board.state,
board.forms) do no I/O: plain data in, plain data out.
"""
