"""Installed distributions for the tests of what packages contribute: the metadata, entry
points and modules pip leaves in a site folder."""
from __future__ import annotations

from pathlib import Path


def install(site: Path, package: str, group: str, entries: dict, modules: dict) -> Path:
    """``package`` in ``site``, contributing ``entries`` (name -> "module:attribute") to
    ``group``, with ``modules`` (name -> source). Returns ``site``."""
    info = site / f"{package.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))
    for name, code in modules.items():
        (site / f"{name}.py").write_text(code)
    return site
