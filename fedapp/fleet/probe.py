"""Link probe: ``recv HOST PORT`` accepts one connection and prints {"bytes", "seconds"} from
its first byte to its end; ``send HOST PORT NBYTES`` sends that many bytes. The fleet runs
one pair per link and direction (receiver on one end, sender on the other) to measure the
rate each shaped link carries; no third-party tool is needed."""

from __future__ import annotations

import json
import socket
import sys
import time


def recv(host: str, port: int) -> dict[str, float]:
    with socket.create_server((host, port)) as srv:
        print("ready", flush=True)
        conn, _ = srv.accept()
        with conn:
            total, first = 0, 0.0
            while chunk := conn.recv(1 << 16):
                if not total:
                    first = time.monotonic()
                total += len(chunk)
            return {"bytes": total, "seconds": time.monotonic() - first}


def send(host: str, port: int, nbytes: int) -> None:
    block = b"\0" * (1 << 16)
    with socket.create_connection((host, port), timeout=60) as conn:
        left = nbytes
        while left > 0:
            conn.sendall(block[: min(left, len(block))])
            left -= min(left, len(block))


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        print(json.dumps(recv(sys.argv[2], int(sys.argv[3]))), flush=True)
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
