"""The live straggler monitor (`stragglerlab monitor`).

It tails a run folder's trace parts as the ranks append them, re-analyses a
rolling window of the last K complete steps with the what-if analysis and the
configured detectors after every new complete step, keeps the history in
`RUN/monitor/windows.jsonl`, raises alerts (webhook, command) when a finding
appears or clears or S crosses a threshold, and serves a page, server-sent
events and Prometheus metrics. No torch, no Ray: it runs beside the job.

One module per concept:

    config.py   MonitorConfig (the flags), file names, loopback check
    tail.py     PartsTail: incremental, validated reading of trace-parts/rank<r>.bin
    steps.py    StepBuffer: complete steps, layout inference, the window's trace frame
    window.py   analyse_window: what-if + detectors on one window -> a history line
    history.py  windows.jsonl / alerts*.jsonl: atomic appends, read back on restart
    state.py    MonitorState: the history the server publishes
    runner.py   Monitor: the loop
    jobs.py     JobRegistry: the jobs one monitor watches (page, overview, /metrics read it)
    fleet.py    Fleet: one Monitor per run folder (--runs, --watch), polled in turn
    import_replay.py  ImportMonitor: an unannotated import's steps replayed as windows
    alerts.py   AlertTracker (events), AlertSender (webhook / command, retries)
    metrics.py  Prometheus text
    server.py   Starlette app + uvicorn on a thread (needs the `monitor` extra)
    page.py     the page (inline HTML/JS, canvas heatmap)
    feed.py     PartsFeeder: replay a trace into trace parts step by step (tests, benchmarks)

    from stragglerlab.monitor import Monitor, MonitorConfig, monitor_for
    Monitor(MonitorConfig(run=Path("results/x/0"))).run(once=True)
    monitor_for(MonitorConfig(run=Path("out/imported"))).run(once=True)  # an import too
"""

from stragglerlab.monitor.config import MonitorConfig
from stragglerlab.monitor.import_replay import ImportMonitor, monitor_for
from stragglerlab.monitor.runner import Monitor

__all__ = ["ImportMonitor", "Monitor", "MonitorConfig", "monitor_for"]
