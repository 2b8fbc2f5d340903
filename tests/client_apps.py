"""Test ClientApps: the real evaluate and query handlers around a train handler a test supplies
(a worker killed, a round held, a poisoned reply), so each test writes only what differs."""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedapp import client_app


def app_with_train(train: Callable[[Message, Context], Message]) -> ClientApp:
    app = ClientApp()
    app.train()(train)
    app.evaluate()(client_app.evaluate)  # the real app's handlers (its decorators return them unchanged)
    app.query()(client_app.query)
    return app
