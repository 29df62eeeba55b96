"""Free ports on 127.0.0.1 for the ``ray start`` of a local head or worker node."""

from __future__ import annotations

import contextlib
import socket

from ..errors import RayError

__all__ = ["free_port_range", "free_ports", "port_free"]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 (held open together so none repeats)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def free_port_range(size: int, exclude: list[int]) -> int:
    """The first port of ``size`` consecutive ports that are free on 127.0.0.1."""
    import random

    rng = random.Random()
    for _ in range(50):
        lo = rng.randrange(20000, 60000 - size)
        if any(lo <= p < lo + size for p in exclude):
            continue
        if all(port_free(p) for p in range(lo, lo + size)):
            return lo
    raise RayError(f"found no {size} consecutive free ports on 127.0.0.1 for Ray workers")


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
