"""fedapp: partial-network federated learning methods on Flower."""

__version__ = "0.1.0"
