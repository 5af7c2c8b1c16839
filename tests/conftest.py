"""Fixtures shared by the unit and e2e tiers: a webhook receiver on loopback for the
monitor's alert tests.

    def test_x(webhook):
        url, received = webhook     # POST bodies land in `received`, parsed as JSON
"""

from __future__ import annotations

import http.server
import json
import threading

import pytest


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    """(URL to POST alerts to, the list of JSON bodies received)."""
    _Hook.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Hook.received
    server.shutdown()
    server.server_close()
