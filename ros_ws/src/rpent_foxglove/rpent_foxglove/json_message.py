"""ROS messages as JSON, for service calls from a viewer's Call Service panel.

A viewer sends a service request as JSON when the server advertises the service with a
JSON schema. Messages here are the generated Python classes; fields follow their own
type annotations (``get_fields_and_field_types``), so nested messages and sequences work
without ``rosidl_runtime_py`` (which ROS's PyPI wheels do not ship).
"""
from __future__ import annotations

import array
import re

_NUMBER = re.compile(r"^(u?int\d+|float|double|float32|float64|byte|char|octet)$")
_SEQUENCE = re.compile(r"^sequence<(.+?)(, \d+)?>$|^(.+)\[\d*\]$")


class JsonMessageError(ValueError):
    pass


def _element_type(ros_type: str):
    match = _SEQUENCE.match(ros_type)
    return (match.group(1) or match.group(3)) if match else None


def _is_text(ros_type: str) -> bool:
    return ros_type == "string" or ros_type.startswith(("string<", "wstring"))


def to_json(msg) -> dict:
    out = {}
    for name, ros_type in msg.get_fields_and_field_types().items():
        value = getattr(msg, name)
        element = _element_type(ros_type)
        if element is not None:
            out[name] = [to_json(v) if hasattr(v, "get_fields_and_field_types")
                         else v.item() if hasattr(v, "item") else v for v in value]
        elif hasattr(value, "get_fields_and_field_types"):
            out[name] = to_json(value)
        else:
            out[name] = value
    return out


def from_json(cls, data: dict):
    """A ``cls`` message with the fields ``data`` gives (the rest at their defaults)."""
    if not isinstance(data, dict):
        raise JsonMessageError(f"{cls.__name__} must be a JSON object, not {type(data).__name__}")
    msg = cls()
    fields = msg.get_fields_and_field_types()
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise JsonMessageError(f"{cls.__name__} has no field(s) {', '.join(unknown)}; fields: "
                               f"{', '.join(fields)}")
    for name, value in data.items():
        current, ros_type = getattr(msg, name), fields[name]
        element = _element_type(ros_type)
        try:
            if hasattr(current, "get_fields_and_field_types"):
                value = from_json(type(current), value)
            elif element is not None:
                if not isinstance(value, list) or not all(_fits(element, v) for v in value):
                    raise TypeError(f"expected a list of {element}")
                if isinstance(current, array.array):
                    value = array.array(current.typecode, value)
            elif not _fits(ros_type, value):
                raise TypeError(f"expected {_scalar(ros_type)['type']}")
            setattr(msg, name, value)
        except (TypeError, AssertionError, ValueError) as err:
            raise JsonMessageError(f"{cls.__name__}.{name} ({ros_type}) cannot be "
                                   f"{value!r}: {err}") from None
    return msg


def json_schema(cls) -> dict:
    """A JSON Schema of ``cls`` (what a viewer shows as the request template)."""
    msg = cls()
    properties = {}
    for name, ros_type in msg.get_fields_and_field_types().items():
        element = _element_type(ros_type)
        value = getattr(msg, name)
        if element is not None:
            properties[name] = {"type": "array", "items": _scalar(element)}
        elif hasattr(value, "get_fields_and_field_types"):
            properties[name] = json_schema(type(value))
        else:
            properties[name] = _scalar(ros_type)
    return {"type": "object", "title": cls.__name__, "properties": properties}


def _fits(ros_type: str, value) -> bool:
    """Whether a JSON value has the field's type (generated messages check types only when
    asked to, so a string would pass for a bool)."""
    kind = _scalar(ros_type)["type"]
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, dict)


def _scalar(ros_type: str) -> dict:
    if ros_type == "boolean":
        return {"type": "boolean"}
    if _is_text(ros_type):
        return {"type": "string"}
    if _NUMBER.match(ros_type):
        return {"type": "integer" if "int" in ros_type or ros_type in ("byte", "octet")
                else "number"}
    return {"type": "object"}
