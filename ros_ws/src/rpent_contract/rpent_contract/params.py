"""Declare, type and validate node parameters at start-up, failing with a clear message.

:func:`declare_settings` declares a settings class (:mod:`rpent_contract.settings`) on a
node and returns the settings; :func:`check_all_known` refuses parameters a node was given
and never declared.
"""
from __future__ import annotations

from typing import Optional

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException

from .settings import Check, ParameterError, parameters_of
from .spelling import did_you_mean


def declare_settings(node, settings_type, defaults: Optional[dict] = None, **given):
    """Declare every parameter of ``settings_type`` on ``node`` and return the settings;
    ``defaults``: defaults known only at start-up (from the namespace, say) by name, each a
    value or a function of the values declared before it; ``given``: its fields that are
    not parameters."""
    values = dict(given)
    for name, (default, spec) in parameters_of(settings_type).items():
        default = (defaults or {}).get(name, default)
        if callable(default):
            default = default(values)
        value = declare(node, name, list(default) if isinstance(default, tuple) else default,
                        spec.description(), spec.check)
        values[name] = tuple(value) if isinstance(default, tuple) else value
    return settings_type(**values)


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


