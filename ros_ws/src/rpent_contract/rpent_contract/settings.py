"""Settings classes: a node's parameters as a frozen dataclass whose fields are
:func:`parameter` s, the one place a parameter's name, type (its default's), default, unit,
range and help are written, and the params file written from it. Plain Python:
:mod:`rpent_contract.params` declares a settings class on a node."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Optional


class ParameterError(ValueError):
    """A parameter has an invalid value; the node cannot start."""


Check = Callable[[Any], Optional[str]]
_PARAMETER = "rpent_parameter"


@dataclasses.dataclass(frozen=True)
class Parameter:
    """What a settings field says about its parameter (the field holds the default)."""
    help: str
    unit: str = ""
    check: Optional[Check] = None
    # The default is the node's to work out at start-up (from its namespace, its other
    # settings, what is installed); the class's is only a placeholder.
    at_startup: bool = False

    def description(self) -> str:
        return f"{self.help} ({self.unit})" if self.unit else self.help


def parameter(default, help: str, unit: str = "", check: Optional[Check] = None,
              at_startup: bool = False):
    """A settings field that is a node parameter named as the field. A list parameter's
    default is a tuple (settings are frozen). ``at_startup``: the node gives the default
    when it declares the field (``declare_settings``'s ``defaults``), and params files leave
    it out."""
    return dataclasses.field(default=default,
                             metadata={_PARAMETER: Parameter(help, unit, check, at_startup)})


def with_default(settings_type, name: str, default, help: str = ""):
    """The parameter ``name`` of ``settings_type`` with another default (and help, when
    given): for a settings class deriving from it, whose embodiment differs there."""
    spec = parameters_of(settings_type)[name][1]
    return dataclasses.field(default=default, metadata={
        _PARAMETER: dataclasses.replace(spec, help=help) if help else spec})


def parameters_of(settings_type) -> dict:
    """{name: (default, Parameter)} of a settings dataclass, in declaration order."""
    return {f.name: (f.default, f.metadata[_PARAMETER])
            for f in dataclasses.fields(settings_type) if _PARAMETER in f.metadata}


def params_yaml(settings_type, header: str) -> str:
    """A params file of every parameter at its default, each with its help: ``header``
    (comment lines) first."""
    lines = [header.rstrip("\n"), "/**:", "  ros__parameters:"]
    for name, (default, spec) in parameters_of(settings_type).items():
        if spec.at_startup:
            lines.append(f"    # {name}: worked out at start-up. {spec.description()}")
            continue
        value = json.dumps(list(default) if isinstance(default, tuple) else default)
        lines.append(f"    {name}: {value}  # {spec.description()}")
    return "\n".join(lines) + "\n"


def write_params_file(settings_type, header: str, argv=None) -> None:
    """A settings module's ``main``: its params file to the path given, else to stdout."""
    argv = sys.argv[1:] if argv is None else argv
    text = params_yaml(settings_type, header)
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)


def positive(value) -> Optional[str]:
    return None if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 \
        else "must be a finite number > 0"


def non_negative(value) -> Optional[str]:
    return None if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0 \
        else "must be a finite number >= 0"


def one_of(*choices) -> Check:
    return lambda value: None if value in choices else \
        f"must be one of {', '.join(map(str, choices))}"


def at_least(lo: float) -> Check:
    return lambda value: None if value >= lo else f"must be >= {lo:g}"


def in_range(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Check:
    """``value`` in [lo, hi], either end left out when open."""
    def check(value):
        if (lo < value if lo_open else lo <= value) and (value < hi if hi_open else value <= hi):
            return None
        return f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    return check


def vector(n: int) -> Check:
    def check(value):
        if len(value) != n or not all(math.isfinite(v) for v in value):
            return f"must be {n} finite numbers"
        return None
    return check
