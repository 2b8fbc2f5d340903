"""What a ClientApp message imports on first use, imported once per app bundle by fedapp's warm
runtime (`[tool.fedapp.runtime] preload` in pyproject.toml; fedapp.deploy.warm_runtime): resolving
a run-config reads every registered method's keys, so every method module is imported by the first
message of each process, about 0.1 CPU s that a forked message would otherwise pay every time."""

from importlib import import_module

from fedapp.methods.registry import MODULES

for _module in MODULES.values():
    import_module(_module)
