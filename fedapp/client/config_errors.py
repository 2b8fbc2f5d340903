"""Run-config errors met on a client travel back as one error reply, not as a traceback in
every client's log: a ClientApp mod turns a ``ConfigError`` into an error reply naming it,
and the server stops the run with that one line when every reply of a round says so
(one client failing alone stays that client's failure)."""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Context, Error, Message
from flwr.clientapp.typing import ClientAppCallable

from fedapp.core.config import ConfigError

CONFIG_ERROR = 4220  # our Error.code for "this client cannot use the run-config"


def config_error_reply(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """ClientApp mod: a ``ConfigError`` in a handler becomes an error reply with its message."""
    try:
        return call_next(msg, context)
    except ConfigError as err:
        return Message(Error(code=CONFIG_ERROR, reason=str(err)), reply_to=msg)


def stop_on_config_errors(replies: Iterable[Message]) -> list[Message]:
    """The replies, unless all of them are run-config errors: then the run stops with the first."""
    out = list(replies)
    errors = [m.error.reason for m in out if m.has_error() and m.error.code == CONFIG_ERROR]
    if out and len(errors) == len(out):
        raise ConfigError(errors[0])
    return out
