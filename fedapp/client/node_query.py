"""The ClientApp's ``query`` handler: who this node is (partition, device facts, the device it
trains on, energy meter, its package versions). A query that asks for ``data`` is answered by
fedapp.client.data_query instead (the digest of the node's data, asked once after discovery).

Kept apart from fedapp.client.handlers so that discovery, the first message every node answers,
imports neither the data loaders nor the method modules: only the base run-config keys are
read here (the server has already checked the whole run-config before it asks). torch is
imported only when the device must be looked for (``auto``, ``cuda``, ``mps``): a node set to
``cpu`` answers without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedapp.core.config import ConfigError, RunConfig, parse
from fedapp.core.versions import version_facts
from fedapp.energy.auto import MeterSettings, process_sampler
from fedapp.methods.tier_facts import NODE_FACTS as TIER_FACTS

if TYPE_CHECKING:
    import torch

NODE_FACTS = (*TIER_FACTS, "device-name", "num-partitions")  # what the node-config says of itself


def training_device(cfg: RunConfig, node_config: Any) -> torch.device | None:
    """The device this node trains on (the node-config's ``device`` wins); None where that is
    ``cpu``, which needs no torch import to say."""
    own = node_config.get("device")
    if (str(own) if own else cfg.device) == "cpu":
        return None
    from fedapp.core.device import node_device

    return node_device(cfg, node_config)


def handle_query(msg: Message, context: Context) -> Message:
    """Tell the server who this node is: its partition, device facts, the device it will train on,
    and its energy meter (device and meter opened here, so a device or meter named but absent
    stops the run at discovery)."""
    asked = msg.content.get("config")
    if isinstance(asked, ConfigRecord) and asked.get("ask") == "data":
        from fedapp.client.data_query import handle_data_query

        return handle_data_query(msg, context)
    nc = context.node_config
    info: dict[str, int | float | str] = {"partition-id": int(nc["partition-id"])}  # type: ignore[arg-type]
    for k in NODE_FACTS:
        if k in nc:
            info[k] = nc[k]  # type: ignore[assignment]
    info.update(version_facts())
    try:
        cfg = parse(RunConfig, context.run_config)
        device = training_device(cfg, nc)
    except ConfigError as err:
        info["device-error"] = str(err)
        return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)  # type: ignore[arg-type]
    # where client state lives: resume=true refuses a method whose state was in memory (checkpoint.check_state_kept)
    info["state-store"] = cfg.state_store if cfg.state_store != "auto" else ("disk" if nc.get("state-dir") else "context")
    if device is None:
        info["device"] = "cpu"
    else:
        from fedapp.core.device import describe

        info["device"] = describe(device)
    try:
        info["energy-meter"] = process_sampler(MeterSettings.of(cfg, nc, device))[1]
    except ConfigError as err:
        info["energy-error"] = str(err)
    return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)  # type: ignore[arg-type]
