"""Declare, type and validate node parameters at start-up, failing with a clear message.

A node's settings are a frozen dataclass whose fields are :func:`parameter` s: the one
place a parameter's name, type (its default's), default, unit, range and help are written.
:func:`declare_settings` declares them on the node and returns the settings; the node's
params file and its bring-up's arguments are generated from or tested against the class.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException

from .spelling import did_you_mean


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

    def description(self) -> str:
        return f"{self.help} ({self.unit})" if self.unit else self.help


def parameter(default, help: str, unit: str = "", check: Optional[Check] = None):
    """A settings field that is a node parameter named as the field. A list parameter's
    default is a tuple (settings are frozen)."""
    return dataclasses.field(default=default,
                             metadata={_PARAMETER: Parameter(help, unit, check)})


def parameters_of(settings_type) -> dict:
    """{name: (default, Parameter)} of a settings dataclass, in declaration order."""
    return {f.name: (f.default, f.metadata[_PARAMETER])
            for f in dataclasses.fields(settings_type) if _PARAMETER in f.metadata}


def declare_settings(node, settings_type, defaults: Optional[dict] = None, **given):
    """Declare every parameter of ``settings_type`` on ``node`` and return the settings;
    ``defaults``: defaults known only at start-up (from the namespace, say) by name;
    ``given``: its fields that are not parameters."""
    values = dict(given)
    for name, (default, spec) in parameters_of(settings_type).items():
        default = (defaults or {}).get(name, default)
        value = declare(node, name, list(default) if isinstance(default, tuple) else default,
                        spec.description(), spec.check)
        values[name] = tuple(value) if isinstance(default, tuple) else value
    return settings_type(**values)


def params_yaml(settings_type, header: str) -> str:
    """A params file of every parameter at its default, each with its help: ``header``
    (comment lines) first."""
    lines = [header.rstrip("\n"), "/**:", "  ros__parameters:"]
    for name, (default, spec) in parameters_of(settings_type).items():
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


def declare(node, name: str, default, description: str, check: Optional[Check] = None):
    """Declare a read-only, typed parameter and return its validated value.

    ``check`` returns None when the value is fine, else what is wrong with it.
    """
    try:
        node.declare_parameter(
            name, default, ParameterDescriptor(description=description, read_only=True)
        )
    except InvalidParameterTypeException as err:
        raise ParameterError(
            f"parameter '{name}' has the wrong type ({err}); expected the type of "
            f"its default {default!r} (write floats with a decimal point, e.g. 1.0)"
        ) from None
    value = node.get_parameter(name).value
    if isinstance(value, (list, tuple)) or type(value).__name__ == "array":
        value = list(value)
    problem = check(value) if check else None
    if problem:
        raise ParameterError(f"parameter '{name}' = {value!r}: {problem}")
    return value


def check_all_known(node) -> None:
    """Refuse parameters given to ``node`` (a params file's keys, ``-p``) that it never
    declared, each with the closest name it has: ROS ignores them, so a misspelt key would
    silently run with the default. Call once every parameter is declared."""
    # rclpy keeps what it was given in this attribute (Humble and Jazzy); no public accessor.
    given = getattr(node, "_parameter_overrides", {})
    declared = set(node.list_parameters([], 0).names)
    # QoS overrides are read when a publisher or subscription asks for them, if it does.
    unknown = sorted(name for name in given
                     if name not in declared and not name.startswith("qos_overrides."))
    if unknown:
        guesses = [f"'{name}'{did_you_mean(name, declared, quote=True)}" for name in unknown]
        raise ParameterError(
            f"{node.get_name()} has no parameter {', '.join(guesses)}: correct the params "
            "file or the -p argument (ROS would ignore it and use the default)")


def positive(value) -> Optional[str]:
    return None if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 \
        else "must be a finite number > 0"


def non_negative(value) -> Optional[str]:
    return None if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0 \
        else "must be a finite number >= 0"


def one_of(*choices) -> Check:
    return lambda value: None if value in choices else \
        f"must be one of {', '.join(map(str, choices))}"


def vector(n: int) -> Check:
    def check(value):
        if len(value) != n or not all(math.isfinite(v) for v in value):
            return f"must be {n} finite numbers"
        return None
    return check
