"""Bytes a message puts on the wire: the protobuf size of its RecordDict as Flower serialises it
(flwr.common.serde), not an estimate from array sizes, so config, metrics, npy headers and
protobuf framing count too. A RecordDict's size is the sum of its records' (one repeated field),
so each record is sized once per round and a record shared by many messages (the dense global
model) is not serialised again for each."""

from __future__ import annotations

from flwr.app import RecordDict
from flwr.common.serde import recorddict_to_proto


class Sizer:
    """Serialized sizes, remembered per (record name, record object) until ``clear``."""

    def __init__(self) -> None:
        self._sizes: dict[tuple[str, int], tuple[object, int]] = {}

    def size(self, content: RecordDict) -> int:
        total = 0
        for name, record in content.items():
            key = (name, id(record))
            if key not in self._sizes:  # the entry keeps the record alive, so its id names no other record meanwhile
                self._sizes[key] = (record, recorddict_to_proto(RecordDict({name: record})).ByteSize())
            total += self._sizes[key][1]
        return total

    def clear(self) -> None:
        self._sizes.clear()


def message_bytes(content: RecordDict) -> int:
    """One message's serialized RecordDict size."""
    return int(recorddict_to_proto(content).ByteSize())


def wire_row(down: dict[int, int], up: dict[int, int]) -> dict[str, object]:
    """The round's traffic keys: bytes each way, per partition [down, up], and the total in MB (1e6 bytes)."""
    total_down, total_up = sum(down.values()), sum(up.values())
    clients = {str(p): [down.get(p, 0), up.get(p, 0)] for p in sorted(set(down) | set(up))}
    return {
        "wire_bytes_down": total_down, "wire_bytes_up": total_up, "wire_bytes_clients": clients,
        "mb_total": (total_down + total_up) / 1e6,
    }  # fmt: skip
