"""The ClientApp Flower loads from the app directory (`[tool.flwr.app.components]`); it lives in
fedapp.client_app, so the package never imports this top-level module."""

from fedapp.client_app import app

__all__ = ["app"]
