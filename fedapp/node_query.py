"""The ClientApp's ``query`` handler: who this node is (partition, device facts, energy meter).

Kept apart from fedapp.client so that discovery, the first message every node answers,
imports neither torch nor the data loaders: only the base run-config keys are read here
(the server has already checked the whole run-config before it asks).
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedapp.config import ConfigError, RunConfig, parse
from fedapp.energy.auto import MeterSettings, process_sampler

NODE_FACTS = ("tier", "active-fraction", "device-name", "num-partitions")


def handle_query(msg: Message, context: Context) -> Message:
    """Tell the server who this node is: its partition, device facts and energy meter
    (opened here, so a meter named but absent stops the run at discovery)."""
    nc = context.node_config
    info: dict[str, int | float | str] = {"partition-id": int(nc["partition-id"])}  # type: ignore[arg-type]
    for k in NODE_FACTS:
        if k in nc:
            info[k] = nc[k]  # type: ignore[assignment]
    try:
        info["energy-meter"] = process_sampler(MeterSettings.of(parse(RunConfig, context.run_config)))[1]
    except ConfigError as err:
        info["energy-error"] = str(err)
    return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)  # type: ignore[arg-type]
