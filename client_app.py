"""ClientApp: train / evaluate / query handlers, each delegating to fedapp.client."""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedapp.client import handle_evaluate, handle_query, handle_train
from fedapp.client_config_errors import config_error_reply

app = ClientApp(mods=[config_error_reply])  # a run-config error: one error reply, not a traceback per client


@app.train()
def train(msg: Message, context: Context) -> Message:
    return handle_train(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return handle_evaluate(msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    return handle_query(msg, context)
