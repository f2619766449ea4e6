"""Plain ctypes views of pynvml's structures: same bytes, same values, no Python hooks."""

from __future__ import annotations

import ctypes
import sys

import pynvml
import pytest

from kube_gpu_exporter.exporter.struct_views import (
    LayoutMismatch,
    check_same_layout,
    plain_type,
    view,
)


def _offsets(ctype: type[ctypes.Structure]) -> list[tuple[str, int, int]]:
    return [
        (name, getattr(ctype, name).offset, getattr(ctype, name).size)
        for name, *_ in ctype._fields_
    ]


@pytest.mark.parametrize(
    "ctype",
    [
        pynvml.c_nvmlFieldValue_t,
        pynvml.c_nvmlGpmMetricsGet_t,
        pynvml.c_nvmlUtilization_t,
        pynvml.c_nvmlMemory_v2_t,
        pynvml.c_nvmlProcessDetailList_v1_t,
    ],
)
def test_plain_type_has_the_layout_and_none_of_the_hooks(ctype):
    plain = plain_type(ctype)
    assert plain is not ctype
    assert ctypes.sizeof(plain) == ctypes.sizeof(ctype)
    assert ctypes.alignment(plain) == ctypes.alignment(ctype)
    assert _offsets(plain) == _offsets(ctype)
    assert plain.__getattribute__ is ctypes.Structure.__getattribute__
    assert plain.__setattr__ is ctypes.Structure.__setattr__


def test_nested_structures_and_arrays_are_plain_too():
    request = plain_type(pynvml.c_nvmlGpmMetricsGet_t)
    metrics = dict((name, kind) for name, kind, *_ in request._fields_)["metrics"]
    assert metrics._length_ == pynvml.NVML_GPM_METRIC_MAX
    assert metrics._type_ is plain_type(pynvml.c_nvmlGpmMetric_t)
    assert metrics._type_ is not pynvml.c_nvmlGpmMetric_t


def test_types_without_hooks_are_used_as_they_are():
    assert plain_type(pynvml.c_nvmlValue_t) is pynvml.c_nvmlValue_t  # a ctypes Union already
    assert plain_type(ctypes.c_uint) is ctypes.c_uint
    assert plain_type(pynvml.c_nvmlGpmSample_t) is pynvml.c_nvmlGpmSample_t


def test_derivation_happens_once_per_type():
    assert plain_type(pynvml.c_nvmlFieldValue_t) is plain_type(pynvml.c_nvmlFieldValue_t)
    arrays = [plain_type(pynvml.c_nvmlFieldValue_t * 7) for _ in range(2)]
    assert arrays[0] is arrays[1]


def test_a_view_reads_every_value_the_original_holds():
    entries = (pynvml.c_nvmlFieldValue_t * 3)()
    entries[0].fieldId, entries[0].scopeId, entries[0].timestamp = 41, 3, 1_700_000_000_000_000
    entries[0].valueType, entries[0].value.ullVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 2**63
    entries[1].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    entries[2].valueType, entries[2].value.dVal = pynvml.NVML_VALUE_TYPE_DOUBLE, -1.25
    plain = view(entries)
    assert type(plain) is not type(entries)
    for original, seen in zip(entries, plain, strict=True):
        for name, *_ in pynvml.c_nvmlFieldValue_t._fields_[:-1]:
            assert getattr(seen, name) == getattr(original, name)
        assert bytes(seen.value) == bytes(original.value)
    assert plain[0].value.ullVal == 2**63
    assert plain[2].value.dVal == -1.25


def test_a_view_shares_the_memory_it_reads():
    util = pynvml.c_nvmlUtilization_t()
    plain = view(util)
    plain.gpu = 97
    util.memory = 13
    assert (util.gpu, plain.memory) == (97, 13)


def test_char_arrays_read_as_bytes_through_a_view():
    info = pynvml.nvmlPciInfo_t()
    info.busId = "00000000:17:00.0"
    assert info.busId == "00000000:17:00.0"  # pynvml decodes
    assert view(info).busId == b"00000000:17:00.0"


def test_packing_is_kept():
    class Packed(pynvml._PrintableStructure):
        _pack_ = 1
        _fields_ = (("flag", ctypes.c_uint8), ("count", ctypes.c_uint64))

    plain = plain_type(Packed)
    assert ctypes.sizeof(plain) == ctypes.sizeof(Packed) == 9
    assert plain.count.offset == 1


def test_a_copy_that_cannot_have_the_layout_raises_when_derived():
    class Base(pynvml._PrintableStructure):
        _fields_: tuple[tuple[str, type], ...] = (("version", ctypes.c_uint),)

    class Extended(Base):  # ctypes puts Base's fields first; Extended._fields_ lists only its own
        _fields_ = (("value", ctypes.c_ulonglong),)

    with pytest.raises(LayoutMismatch):
        plain_type(Extended)


def test_check_same_layout_names_the_field_that_moved():
    class A(ctypes.Structure):
        _fields_ = (("a", ctypes.c_uint32), ("b", ctypes.c_uint32))

    class B(ctypes.Structure):
        _fields_ = (("b", ctypes.c_uint32), ("a", ctypes.c_uint32))

    class C(ctypes.Structure):
        _fields_ = (("a", ctypes.c_uint32),)

    check_same_layout(A, A)
    with pytest.raises(LayoutMismatch, match=r"A\.a"):
        check_same_layout(A, B)
    with pytest.raises(LayoutMismatch, match="bytes"):
        check_same_layout(A, C)


def test_foreign_byte_order_is_kept_as_it_is_or_refused():
    foreign = (
        ctypes.BigEndianStructure if sys.byteorder == "little" else ctypes.LittleEndianStructure
    )

    # A base class chosen at run time, which a type checker cannot follow.
    class Swapped(foreign):  # type: ignore[misc,valid-type]
        _fields_ = (("value", ctypes.c_uint32),)

    class Holder(pynvml._PrintableStructure):
        _fields_ = (("inner", Swapped),)

    class HookedSwapped(foreign):  # type: ignore[misc,valid-type]
        _fields_ = (("value", ctypes.c_uint32),)

        def __getattribute__(self, name):
            return super().__getattribute__(name)

    holder = Holder()
    holder.inner.value = 0x01020304
    assert plain_type(Swapped) is Swapped
    assert view(holder).inner.value == 0x01020304
    with pytest.raises(LayoutMismatch, match="byte order"):
        plain_type(HookedSwapped)
