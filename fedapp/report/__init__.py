"""`fedapp report`: comparison tables, plots, provenance and optional sections from run folders."""
