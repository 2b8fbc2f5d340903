"""Model zoo: build a model by name for a dataset's input shape and class count (fedapp.models.registry)."""

from fedapp.models.registry import MODELS, build_model, initial_model, register_model

__all__ = ["MODELS", "build_model", "initial_model", "register_model"]
