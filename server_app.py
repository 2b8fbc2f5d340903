"""The ServerApp Flower loads from the app directory (`[tool.flwr.app.components]`); it lives in
fedapp.server_app, so the package never imports this top-level module."""

from fedapp.server_app import app

__all__ = ["app"]
