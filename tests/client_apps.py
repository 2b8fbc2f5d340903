"""Test ClientApps: the real evaluate and query handlers around a train handler a test supplies
(a worker killed, a round held, a poisoned reply), so each test writes only what differs."""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedapp.client.handlers import handle_evaluate
from fedapp.client.node_query import handle_query


def app_with_train(train: Callable[[Message, Context], Message]) -> ClientApp:
    app = ClientApp()
    app.train()(train)

    @app.evaluate()
    def _evaluate(msg: Message, context: Context) -> Message:
        return handle_evaluate(msg, context)

    @app.query()
    def _query(msg: Message, context: Context) -> Message:
        return handle_query(msg, context)

    return app
