"""Link probe: ``recv HOST PORT`` accepts one connection, reads it to its end and answers one
byte; ``send HOST PORT NBYTES`` connects, sends NBYTES, and prints {"bytes", "seconds"} timed
from before its connect to the receiver's answer. Timing at the sender, end to end, can only
add time (handshake, the answer's trip, a late wake-up), so on a busy machine the rate is
understated, never overstated. The fleet runs one pair per link and direction; no
third-party tool is needed."""

from __future__ import annotations

import json
import socket
import sys
import time


def recv(host: str, port: int) -> None:
    with socket.create_server((host, port)) as srv:
        print("ready", flush=True)
        conn, _ = srv.accept()
        with conn:
            while conn.recv(1 << 16):
                pass
            conn.sendall(b"k")


def send(host: str, port: int, nbytes: int) -> dict[str, float]:
    block = b"\0" * (1 << 16)
    t0 = time.monotonic()
    with socket.create_connection((host, port), timeout=600) as conn:
        left = nbytes
        while left > 0:
            conn.sendall(block[: min(left, len(block))])
            left -= min(left, len(block))
        conn.shutdown(socket.SHUT_WR)
        if conn.recv(1) != b"k":
            raise OSError("the probe's receiver did not answer")
    return {"bytes": nbytes, "seconds": time.monotonic() - t0}


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(sys.argv[2], int(sys.argv[3]))
    else:
        print(json.dumps(send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))), flush=True)
