"""HTTPS server for the mutating webhook: `POST /mutate`, `GET /healthz`, `GET /readyz`, `GET /metrics`.

The decision itself lives in :mod:`gpu_scheduling.admission`; this module only moves bytes and keeps serving:
a malformed body is answered 400, an unexpected error is logged and answered 500.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import ssl
import time

from aiohttp import web

from gpu_scheduling import admission, health

log = logging.getLogger("gpu_scheduling.webhook")

MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver's own request limit for objects is ~3 MiB


@dataclasses.dataclass
class WebhookMetrics:
    requests: int = 0
    patched: int = 0
    denied: int = 0
    bad_requests: int = 0
    errors: int = 0
    seconds_sum: float = 0.0

    def render(self) -> str:
        rows = [
            ("gpu_webhook_requests_total", "counter", "Admission requests answered.", self.requests),
            ("gpu_webhook_patched_total", "counter", "Pods given CUDA_VISIBLE_DEVICES.", self.patched),
            ("gpu_webhook_denied_total", "counter", "Pods refused with a message.", self.denied),
            ("gpu_webhook_bad_requests_total", "counter", "Bodies that were not AdmissionReviews (HTTP 400).",
             self.bad_requests),
            ("gpu_webhook_errors_total", "counter", "Unexpected errors (HTTP 500).", self.errors),
            ("gpu_webhook_request_seconds_sum", "counter", "Time spent deciding.", round(self.seconds_sum, 6)),
        ]
        return "".join(f"# HELP {n} {h}\n# TYPE {n} {t}\n{n} {v}\n" for n, t, h, v in rows)


def make_app(metrics: WebhookMetrics | None = None) -> web.Application:
    metrics = metrics or WebhookMetrics()

    async def mutate(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            body = await request.read()
            review_request = admission.parse_review(body)
            review = admission.review_pod(review_request)
        except web.HTTPException:  # e.g. 413 for a body over MAX_BODY_BYTES: aiohttp's own answer is right
            metrics.bad_requests += 1
            raise
        except admission.BadRequest as exc:
            metrics.bad_requests += 1
            log.warning("bad admission request from %s: %s", request.remote, exc)
            return web.json_response({"error": str(exc)}, status=400)
        except Exception:
            metrics.errors += 1
            log.exception("unexpected error answering an admission request")
            return web.json_response({"error": "internal error, see the webhook's log"}, status=500)
        response = review["response"]
        metrics.requests += 1
        if not response["allowed"]:
            metrics.denied += 1
            log.info("denied %s: %s", response["uid"], response["status"]["message"])
        elif "patch" in response:
            metrics.patched += 1
        metrics.seconds_sum += time.perf_counter() - started
        return web.json_response(review)

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/mutate", mutate)
    health.add_probes(app, lambda: True, metrics.render)
    return app


def ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu-webhook",
                                description="Mutating admission webhook that sets CUDA_VISIBLE_DEVICES from "
                                            "the gpu-scheduling-map annotation.")
    p.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--tls-cert-file", required=True, help="PEM serving certificate (chain)")
    p.add_argument("--tls-private-key-file", required=True, help="PEM private key")
    p.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    ctx = ssl_context(args.tls_cert_file, args.tls_private_key_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = await health.serve(make_app(), args.host, args.port, ssl_context=ctx)
    log.info("gpu-webhook serving HTTPS on %s:%d", args.host, args.port)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(run(args))
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(f"gpu-webhook: cannot start: {exc}") from None


if __name__ == "__main__":
    main()
