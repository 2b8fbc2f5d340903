"""The answer to the server's data query, sent once after discovery (fedapp.server.node_data): the
digest of this node's data as it loads it, and its versions, so the run folder records what each
node trained on. Kept apart from fedapp.client.node_query: discovery itself loads no data."""

from __future__ import annotations

import dataclasses

from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedapp.core.versions import version_facts


def handle_data_query(msg: Message, context: Context) -> Message:
    """``data-sha256`` of the node's partition (the server's ``num-clients`` stands in for 0), or ``data-error``."""
    from fedapp.client.cache import resolve_once
    from fedapp.client.handlers import node_local
    from fedapp.data import client_data
    from fedapp.data.digest import data_digest

    asked = msg.content["config"]
    nc = context.node_config
    info: dict[str, int | str] = {"partition-id": int(nc["partition-id"]), **version_facts()}  # type: ignore[arg-type]
    try:
        cfg = node_local(resolve_once(context.run_config)[0], nc)
        if not cfg.num_clients:
            cfg = dataclasses.replace(cfg, num_clients=int(asked["num-clients"]))  # type: ignore[arg-type]
        info["data-sha256"] = data_digest(client_data(cfg, info["partition-id"]))  # type: ignore[arg-type]
    except Exception as err:  # reported, not raised: the first round fails on the same data with its own error
        info["data-error"] = f"{type(err).__name__}: {err}"[:900]
    return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)  # type: ignore[arg-type]
