"""Declare, type and validate node parameters at start-up, failing with a clear message."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException


class ParameterError(ValueError):
    """A parameter has an invalid value; the node cannot start."""


Check = Callable[[Any], Optional[str]]


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


def positive(value) -> Optional[str]:
    return None if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 \
        else "must be a finite number > 0"


def non_negative(value) -> Optional[str]:
    return None if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0 \
        else "must be a finite number >= 0"


def one_of(*choices) -> Check:
    return lambda value: None if value in choices else f"must be one of {', '.join(map(str, choices))}"


def vector(n: int) -> Check:
    def check(value):
        if len(value) != n or not all(math.isfinite(v) for v in value):
            return f"must be {n} finite numbers"
        return None
    return check
