"""The client's model cache under ``downlink = selected``: the last global model the server sent
this node, kept in the client state store's ``model-cache`` slot (Context.state in simulation, the
node's disk store on SuperNodes; keyed by run, as all client state is, and stamped with its round
and digest).

A partial message names the round and digest of the model it builds on (``downlink-base``,
``downlink-base-digest``) and the digest of the model it completes (``downlink-digest``). The
cache is used only if its round and digest are that base, its tensors have the model's names,
shapes and dtypes, and its values hash to that digest; the cache plus the sent tensors must then
hash to the new digest. A tensor of which only some entries changed comes as those entries (C
order) and a flat mask of them, written over the cached tensor. Anything else raises
:class:`CacheMiss` before any training: the node answers "cache-miss" with the reason's code and
the server sends it the full model in the same round (fedapp.downlink.server). A full message (base 0) replaces the cache whatever it held.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedapp.core.state import ContextStore, DiskStore, StateError
from fedapp.downlink.digest import digest_of

SLOT = "model-cache"
ROUND, DIGEST, PREFIX = "@/round", "@/digest", "model/"
DIGEST_KEY, BASE_KEY, BASE_DIGEST_KEY = "downlink-digest", "downlink-base", "downlink-base-digest"
MISS_METRIC = "cache-miss"  # reply metric: the reason code below
REASONS = {1: "missing", 2: "stale round", 3: "wrong digest", 4: "wrong shape", 5: "rebuilt model's digest differs", 6: "unreadable"}


class CacheMiss(Exception):
    """The cache cannot complete this message's model; ``code`` is a key of REASONS."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"model cache {REASONS[code]}: {detail}")
        self.code = code


def read(slots: ContextStore | DiskStore, pid: int) -> tuple[int, str, dict[str, np.ndarray]]:
    """(round, digest, tensors) of the cache; CacheMiss if there is none or it cannot be read."""
    try:
        entries = slots.read(pid, SLOT)
    except StateError as err:
        raise CacheMiss(6, str(err)) from None
    if not entries:
        raise CacheMiss(1, "no cached model")
    try:
        r, d = entries[ROUND], entries[DIGEST]
        stamp = (int(r.reshape(-1)[0]), str(d.reshape(-1)[0]))
    except (KeyError, ValueError, TypeError, IndexError) as err:
        raise CacheMiss(6, f"no readable round/digest stamp ({type(err).__name__})") from None
    return stamp[0], stamp[1], {n[len(PREFIX) :]: a for n, a in entries.items() if n.startswith(PREFIX)}


def check_layout(tensors: Mapping[str, np.ndarray], like: Mapping[str, np.ndarray]) -> None:
    """The cache's tensors are exactly the model's, by name, shape and dtype."""
    if set(tensors) != set(like):
        odd = sorted(set(tensors) ^ set(like))[0]
        raise CacheMiss(4, f"tensor {odd!r} {'is not in the model' if odd in tensors else 'is missing'}")
    for n, ref in like.items():
        if tensors[n].shape != ref.shape or tensors[n].dtype != ref.dtype:
            raise CacheMiss(4, f"{n}: {tensors[n].dtype}{list(tensors[n].shape)}, expected {ref.dtype}{list(ref.shape)}")


def assemble(
    slots: ContextStore | DiskStore, pid: int, server_round: int, config: Mapping[str, object],
    sent: Mapping[str, np.ndarray], like: Mapping[str, np.ndarray], masks: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The whole global model of this message (``sent`` over the verified cache), saved as the new
    cache. ``masks[n]``: ``sent[n]`` holds only the entries of tensor n where this flat mask is on."""
    masks = masks or {}
    want, base, base_digest = str(config[DIGEST_KEY]), int(config.get(BASE_KEY, 0)), str(config.get(BASE_DIGEST_KEY, ""))  # type: ignore[call-overload]
    if base == 0:
        if masks:
            raise ValueError(f"full downlink message sends {sorted(masks)[:3]} as masked entries")
        missing = sorted(set(like) - set(sent))
        if missing:
            raise ValueError(f"full downlink message lacks {missing[:3]}")
        model = dict(sent)
        if digest_of(model) != want:
            raise ValueError("the full model received does not match the server's digest (corrupted in transit)")
    else:
        r, d, cached = read(slots, pid)
        if r != base:
            raise CacheMiss(2, f"cache holds round {r}, the message builds on round {base}")
        if d != base_digest:
            raise CacheMiss(3, f"cache stamped {d[:12]}, the server sent {base_digest[:12]} for round {base}")
        check_layout(cached, like)
        if digest_of(cached) != base_digest:
            raise CacheMiss(3, f"cached values hash to another digest than their stamp {d[:12]} (corrupted)")
        model = {**cached, **{n: a for n, a in sent.items() if n not in masks}}
        for n, m in masks.items():
            full = cached[n].reshape(-1).copy()
            full[m] = sent[n]
            model[n] = full.reshape(cached[n].shape)
        check_layout(model, like)
        if digest_of(model) != want:
            raise CacheMiss(5, f"cache of round {base} plus the {len(sent)} sent tensors does not hash to {want[:12]}")
    entries = {PREFIX + n: np.asarray(a) for n, a in model.items()}
    slots.write(pid, SLOT, {**entries, ROUND: np.array([server_round], np.int64), DIGEST: np.array(want)})
    return model
