"""An example of a package contributing to rpent (see its pyproject.toml's entry points)."""
