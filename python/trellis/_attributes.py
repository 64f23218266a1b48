"""Python values as MLIR attribute text, for graph ops' attributes."""

import math
from typing import Any, Mapping, Union


class Attr:
    """MLIR attribute text given as is: ``Attr("array<i64: 0, 2>")``."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Attr({self.text!r})"


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"attribute value {value!r}: expected a finite number")
    text = repr(float(value))
    # MLIR reads "1e-05" but wants a digit before the exponent's mark.
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def attribute_text(value: Any) -> str:
    """One attribute's text: bool -> unit (True only), int -> i64, float ->
    f64, str -> string, a list of ints -> array<i64>, of floats ->
    array<f64>, of strings -> an array of strings; Attr passes through."""
    if isinstance(value, Attr):
        return value.text
    if isinstance(value, bool):
        raise TypeError("bool attributes are unit attributes: pass True in the "
                        "dictionary (False leaves them out)")
    if isinstance(value, int):
        return f"{value} : i64"
    if isinstance(value, float):
        return f"{_float(value)} : f64"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value) and value:
            return "[" + ", ".join(_string(v) for v in value) + "]"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return "array<i64" + "".join(
                (": " if i == 0 else ", ") + str(v)
                for i, v in enumerate(value)) + ">"
        if all(isinstance(v, (int, float)) and not isinstance(v, bool)
               for v in value):
            return "array<f64" + "".join(
                (": " if i == 0 else ", ") + _float(v)
                for i, v in enumerate(value)) + ">"
    raise TypeError(f"attribute value {value!r}: expected a bool, int, float, "
                    "str, a list of them, or trellis.Attr")


def dictionary_text(attributes: Union[None, str, Mapping[str, Any]]) -> str:
    """An attribute dictionary's text (a str is taken as that text)."""
    if attributes is None:
        return ""
    if isinstance(attributes, str):
        return attributes
    entries = []
    for name, value in attributes.items():
        if value is True:
            entries.append(name)
        elif value is False or value is None:
            continue
        else:
            entries.append(f"{name} = {attribute_text(value)}")
    return "{" + ", ".join(entries) + "}"
