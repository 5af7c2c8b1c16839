"""The ranks' rendezvous store, listening on the given address only.

`dist.init_process_group(init_method="tcp://127.0.0.1:PORT")` makes rank 0's
TCPStore listen on every interface (the address only tells the other ranks
where to connect). Here rank 0 binds the listening socket to the given
address itself and hands it to the store (`master_listen_fd`): loopback in a
private run, so no rank socket of it is reachable from outside the host; rank
0's node IP on a cluster (workloads/cluster.py), the one address peers need.

    store = loopback_store("tcp://127.0.0.1:29500", rank, world, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)
"""

from __future__ import annotations

import datetime as dt
import socket
from urllib.parse import urlparse


def loopback_store(init_method: str, rank: int, world: int, timeout: dt.timedelta):
    """A TCPStore at init_method's host:port; rank 0 listens on that address only."""
    import torch.distributed as dist

    url = urlparse(init_method)
    host, port = url.hostname or "127.0.0.1", int(url.port or 0)
    if rank != 0:
        return dist.TCPStore(host, port, world, False, timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(max(128, world))
    except OSError:
        sock.close()
        raise
    # detach: the store owns the listening fd from now on (closes it when destroyed)
    return dist.TCPStore(host, port, world, True, timeout=timeout,
                         master_listen_fd=sock.detach(), use_libuv=True)
