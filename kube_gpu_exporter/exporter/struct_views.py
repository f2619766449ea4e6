"""C-speed reads of pynvml's structures.

nvidia-ml-py's structures derive from `_PrintableStructure`, whose `__getattribute__` and
`__setattr__` are Python functions: every field read or write runs Python code, which on a
49-entry field-value batch or a 15-metric GPM request per GPU per sweep is a visible share of
the exporter's CPU. `plain_type` derives, once per type, a plain `ctypes` type with the same
fields (recursively through nested structures, unions and arrays, with the same packing), and
`view` reads an instance through it without copying. The derived type must have the original's
exact layout; a difference raises `LayoutMismatch` when it is derived, never a wrong value later.

One difference is visible: a `c_char` array field reads as bytes through a view, where pynvml
decodes it to str. The hot paths that use views read numbers only.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

_CTypes = type[Any]

_Aggregate = (ctypes.Structure, ctypes.Union)
# The classes whose attribute access is ctypes' own: a type that inherits its hooks from
# anything else is copied.
_PLAIN_BASES = frozenset(
    {ctypes.Structure, ctypes.Union, object}
    | {
        getattr(ctypes, f"{order}Endian{kind}", ctypes.Structure)
        for order in ("Big", "Little")
        for kind in ("Structure", "Union")
    }
)

_derived: dict[_CTypes, _CTypes] = {}
_lock = threading.Lock()


class LayoutMismatch(TypeError):
    """A derived plain type would not read the same bytes as the type it stands for."""


def plain_type(ctype: _CTypes) -> _CTypes:
    """The plain ctypes type laid out as `ctype`; `ctype` itself when it has no Python hooks."""
    found = _derived.get(ctype)
    if found is not None:
        return found
    with _lock:
        return _plain_locked(ctype)


def view(instance: Any) -> Any:
    """`instance` read through its plain type: the same memory, without pynvml's hooks."""
    plain = plain_type(type(instance))
    return instance if plain is type(instance) else plain.from_buffer(instance)


def check_same_layout(original: _CTypes, plain: _CTypes) -> None:
    """Raise LayoutMismatch unless both types have the same size, alignment and fields."""
    if ctypes.sizeof(original) != ctypes.sizeof(plain):
        raise LayoutMismatch(
            f"{plain.__name__} is {ctypes.sizeof(plain)} bytes, "
            f"{original.__name__} {ctypes.sizeof(original)}"
        )
    if ctypes.alignment(original) != ctypes.alignment(plain):
        raise LayoutMismatch(f"{plain.__name__} and {original.__name__} align differently")
    for name, *_ in getattr(original, "_fields_", ()):
        want, got = getattr(original, name), getattr(plain, name, None)
        if got is None or (want.offset, want.size) != (got.offset, got.size):
            raise LayoutMismatch(f"{original.__name__}.{name} is not where the copy has it")


def _plain_locked(ctype: _CTypes) -> _CTypes:
    found = _derived.get(ctype)
    if found is None:
        found = _derive(ctype)
        _derived[ctype] = found
    return found


def _derive(ctype: _CTypes) -> _CTypes:
    if issubclass(ctype, ctypes.Array):
        # typeshed types Array's _type_ as an instance property; on the class it is the type.
        element = _plain_locked(ctype._type_)  # type: ignore[arg-type]
        return ctype if element is ctype._type_ else element * ctype._length_
    if not issubclass(ctype, _Aggregate):
        return ctype  # scalars and pointers have no Python hooks
    fields = [
        (name, _plain_locked(field_type), *bits) for name, field_type, *bits in ctype._fields_
    ]
    if not _hooked(ctype) and all(
        new[1] is old[1] for new, old in zip(fields, ctype._fields_, strict=True)
    ):
        return ctype
    if hasattr(ctype, "_swappedbytes_"):
        raise LayoutMismatch(f"{ctype.__name__} has a foreign byte order")
    base = ctypes.Union if issubclass(ctype, ctypes.Union) else ctypes.Structure
    namespace: dict[str, Any] = {}
    for attribute in ("_pack_", "_align_", "_layout_", "_anonymous_"):
        if attribute in vars(ctype):
            namespace[attribute] = vars(ctype)[attribute]
    namespace["_fields_"] = fields
    plain = type(f"Plain_{ctype.__name__}", (base,), namespace)
    check_same_layout(ctype, plain)
    return plain


def _hooked(ctype: _CTypes) -> bool:
    """Whether some class between `ctype` and ctypes defines attribute hooks or fields of its
    own that a copy of `ctype._fields_` alone would miss."""
    for klass in ctype.__mro__:
        if klass in _PLAIN_BASES or klass is ctype:
            continue
        if issubclass(klass, _Aggregate):
            return True
    return any(hook in vars(ctype) for hook in ("__getattribute__", "__setattr__", "__getattr__"))
