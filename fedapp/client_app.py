"""The ClientApp: train / evaluate / query handlers, each delegating to fedapp.client.handlers. Flower loads
it through the top-level client_app.py; the in-process engine imports it from here.

The handlers import their modules on the first message, not here: Flower's simulation
imports this file once before it starts Ray (only to check that it loads), and the
query handler, the first message every node answers, needs neither the data loaders nor
torch, unless it must look for a GPU (fedapp.client.node_query).
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedapp.client.config_errors import config_error_reply
from fedapp.core.logs import quiet_ray

quiet_ray()  # this module is imported before the simulation starts Ray
app = ClientApp(mods=[config_error_reply])  # a run-config error: one error reply, not a traceback per client


@app.train()
def train(msg: Message, context: Context) -> Message:
    from fedapp.client.handlers import handle_train

    return handle_train(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    from fedapp.client.handlers import handle_evaluate

    return handle_evaluate(msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    from fedapp.client.node_query import handle_query

    return handle_query(msg, context)
