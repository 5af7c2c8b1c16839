"""The monitor's web server: a Starlette app run by uvicorn on a background thread.

Routes (nothing else is served, and nothing from the run folder but what the
monitor computed and its faults.json ground truth):

    /              the page (monitor/page.py: one self-contained HTML document)
    /events        server-sent events: `event: line` per new history line
                   (`?after=SEQ`: only lines after that sequence number),
                   `event: summary` when the summary changes, and `event: end`
                   ({"summary", "truth"}: the last word) when the monitor stops
    /metrics       Prometheus text (monitor/metrics.py)
    /api/windows   {"summary": ..., "lines": [...]} the history (`?after=SEQ`)
    /api/truth     the run's ground truth (faults.json), when it has one

Watching several runs (`--runs`, `--watch`; monitor/jobs.py's registry), the
same routes serve each job below /jobs/NAME/ (its /events ends once that job's
watch stops), and the root is the fleet's:

    /              the overview page (page.OVERVIEW): the jobs, highest S first
    /api/jobs      {"jobs": [...], "refused": N} (JobRegistry.overview's rows)
    /metrics       every job's series, labelled job_name (metrics.jobs_metrics_text)

Binds 127.0.0.1 by default; the socket is bound here before uvicorn starts, so
a port in use is a clear InputError, not a log line from a thread.

    server = MonitorServer(state, run_dir, host="127.0.0.1", port=8765)
    server.start(); ...; server.stop()
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

from stragglerlab.monitor.jobs import Job, JobRegistry
from stragglerlab.monitor.metrics import CONTENT_TYPE, metrics_text
from stragglerlab.monitor.page import OVERVIEW, PAGE
from stragglerlab.monitor.state import MonitorState
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.util.atomic import dumps_json
from stragglerlab.util.errors import InputError

SSE_POLL_S = 0.25
"""How often an open /events stream looks for new lines."""
SSE_KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""


def _int(request, name: str, default: int) -> int:
    try:
        return int(request.query_params.get(name, str(default)))
    except ValueError:
        return default


def _after(request) -> int:
    return _int(request, "after", -1)


def truth(run: Path) -> dict:
    """The run's ground truth for the page: faults.json, when written and readable."""
    folder = RunFolder(path=run)
    if not folder.has_faults:
        return {"available": False, "faults": [], "note": "no faults.json (yet): a live "
                "training run writes it when it ends"}
    try:
        return {"available": True, "faults": [f.to_json() for f in folder.faults]}
    except InputError as e:
        return {"available": False, "faults": [], "note": str(e)}


def make_app(state: MonitorState, run: Path, closing: threading.Event | None = None):
    """The ASGI app serving one job's `state` at / (closing: set to end open event
    streams): a registry of that one job, served as `make_jobs_app` serves one."""
    registry = JobRegistry()
    registry.add(Path(run), state)
    return make_jobs_app(registry, closing, single=True)


def make_jobs_app(registry: JobRegistry, closing: threading.Event | None = None,
                  single: bool = False):
    """The ASGI app serving the registry's jobs. single: its one job at / with today's
    unlabelled /metrics; else the overview at /, each job at /jobs/NAME/ and /metrics
    of every job labelled job_name."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import (
        HTMLResponse,
        JSONResponse,
        RedirectResponse,
        Response,
        StreamingResponse,
    )
    from starlette.routing import Route

    closing = closing or threading.Event()

    def job_of(request) -> Job:
        if single:
            return registry.all()[0]
        job = registry.get(request.path_params["name"])
        if job is None:
            raise HTTPException(404, "no such job (the overview at / lists them)")
        return job

    async def page(request):
        job_of(request)
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-store"})

    async def windows(request):
        state = job_of(request).state
        lines = state.since_json(_after(request))  # the lines' JSON as kept, not re-encoded
        body = b"".join([b'{"summary":', dumps_json(state.summary(), indent=None).rstrip(),
                         b',"lines":[', b",".join(data for _, data in lines), b"]}"])
        return Response(body, media_type="application/json")

    async def truth_route(request):
        return JSONResponse(truth(job_of(request).run))

    async def job_metrics(request):
        state = job_of(request).state
        s = state.summary()
        return Response(metrics_text(state.latest_window(), s["windows_analysed"], s["errors"],
                                     s["nodes"]),
                        media_type=CONTENT_TYPE)

    async def events(request):
        job = job_of(request)
        state, run = job.state, job.run
        after = _after(request)
        limit = _int(request, "limit", 0)  # stop after this many lines (0: never)

        async def stream():
            nonlocal after
            sent, idle, told = 0, 0.0, None
            yield "retry: 2000\n\n"
            while True:
                stopping = closing.is_set() or (not single and state.summary()["finished"])
                # (read first: what follows is then all there)
                for seq, data in state.since_json(after):
                    after = seq
                    yield f"event: line\nid: {seq}\ndata: {data.decode()}\n\n"
                    sent += 1
                    if limit and sent >= limit:
                        return
                summary = state.summary()
                if stopping:  # the last word, with the ground truth the run's end wrote
                    # (the server is going away, or this job's watch stopped: the page
                    # fetches nothing after this)
                    end = {"summary": summary, "truth": truth(run)}
                    yield f"event: end\ndata: {json.dumps(end)}\n\n"
                    return
                if summary != told:  # new lines, or the monitor finished
                    told = summary
                    yield f"event: summary\ndata: {json.dumps(summary)}\n\n"
                    idle = 0.0
                if await request.is_disconnected():
                    return
                await asyncio.sleep(SSE_POLL_S)
                idle += SSE_POLL_S
                if idle >= SSE_KEEPALIVE_S:
                    idle = 0.0
                    yield ": keep-alive\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    if single:
        return Starlette(routes=[
            Route("/", page), Route("/events", events), Route("/metrics", job_metrics),
            Route("/api/windows", windows), Route("/api/truth", truth_route),
        ])

    async def overview(request):
        return HTMLResponse(OVERVIEW, headers={"Cache-Control": "no-store"})

    async def jobs(request):
        return JSONResponse({"jobs": registry.overview(), "refused": registry.refused},
                            headers={"Cache-Control": "no-store"})

    async def all_metrics(request):
        return Response(registry.metrics_text(), media_type=CONTENT_TYPE)

    async def to_slash(request):  # the page's URLs are relative to /jobs/NAME/
        job_of(request)
        return RedirectResponse(f"/jobs/{request.path_params['name']}/", 308)

    return Starlette(routes=[
        Route("/", overview), Route("/api/jobs", jobs), Route("/metrics", all_metrics),
        Route("/jobs/{name}", to_slash), Route("/jobs/{name}/", page),
        Route("/jobs/{name}/events", events), Route("/jobs/{name}/metrics", job_metrics),
        Route("/jobs/{name}/api/windows", windows), Route("/jobs/{name}/api/truth", truth_route),
    ])


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; InputError when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise InputError(f"--host {host}: cannot be resolved ({e.strerror})") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        import errno

        if e.errno == errno.EADDRNOTAVAIL:
            raise InputError(f"cannot listen on {host}:{port} ({e.strerror}): {host} is no "
                             "address of this host; pass one of its own (`ip addr` lists "
                             "them), or leave --host out for 127.0.0.1", "--host") from None
        raise InputError(f"cannot listen on {host}:{port} ({e.strerror}); another monitor "
                         "or program holds the port: pass --port N (0: any free port) or "
                         "--no-serve") from None
    sock.listen(128)
    return sock


class MonitorServer:
    """uvicorn serving `make_app` on its own thread."""

    def __init__(self, state: MonitorState | None, run: Path | None, host: str, port: int,
                 registry: JobRegistry | None = None) -> None:
        """Serves one job (`state`, `run`), or, given `registry`, every job in it."""
        import uvicorn

        self.closing = threading.Event()
        self.sock = bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        app = make_app(state, Path(run), self.closing) if registry is None else \
            make_jobs_app(registry, self.closing)
        config = uvicorn.Config(app, log_level="warning",
                                access_log=False, timeout_graceful_shutdown=2, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="monitor-http", daemon=True)

    @property
    def url(self) -> str:
        """The page's URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self, timeout: float = 10.0) -> None:
        """Serve; returns once uvicorn is up."""
        self.thread.start()
        waited = 0.0
        while not self.server.started and self.thread.is_alive() and waited < timeout:
            threading.Event().wait(0.05)
            waited += 0.05

    def stop(self, timeout: float = 5.0) -> None:
        """Close the event streams, stop uvicorn and wait for its thread."""
        self.closing.set()
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()
