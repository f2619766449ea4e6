"""Per-GPU facts from `nvidia-smi -q -x`, the driver's own tool, as the second reference.

The document follows NVIDIA's nvsmi_device DTD (v12 for drivers 535 to 580). Readings carry their
unit in the text ("81559 MiB", "45 C", "69.50 W"); what a GPU cannot answer reads "N/A",
"[N/A]", "[Not Supported]" and the like, which become None. A number in an unexpected unit is
an error rather than a silent None, so a renamed unit cannot pass as "unsupported".
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from benchmarks.real_gpu import MIB, GpuFacts, bus_id_key

_QUANTITY = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(\S+)$")

# Drivers before 535 wrote <power_readings>; later ones <gpu_power_readings>.
_POWER_SECTIONS = ("gpu_power_readings", "power_readings")
# The 1 s average first: it is what NVML's power usage, and so DCGM_FI_DEV_POWER_USAGE, reports
# on Hopper. <power_draw> is the older drivers' only reading.
_POWER_DRAW = ("average_power_draw", "power_draw", "instant_power_draw")
_POWER_LIMIT = ("current_power_limit", "power_limit")
# Bracketed or not, these say the GPU has no value for the field.
_NO_VALUE = frozenset({"N/A", "Not Supported", "Unknown Error", "Insufficient Permissions"})


class SmiXmlError(ValueError):
    """The text is not an nvidia-smi XML log, or a reading is in a unit we do not expect."""


def smi_facts(xml_text: str) -> dict[str, GpuFacts]:
    """Every <gpu> of an `nvidia-smi -q -x` log, keyed by `bus_id_key` of its PCI bus id."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as err:
        raise SmiXmlError(f"nvidia-smi XML does not parse: {err}") from None
    if root.tag != "nvidia_smi_log":
        raise SmiXmlError(f"nvidia-smi XML: root element is <{root.tag}>, not <nvidia_smi_log>")
    facts: dict[str, GpuFacts] = {}
    for gpu in root.findall("gpu"):
        bus_id = gpu.get("id") or _text(gpu, "pci/pci_bus_id")
        if not bus_id:
            raise SmiXmlError("nvidia-smi XML: a <gpu> has neither an id nor a pci_bus_id")
        try:
            key = bus_id_key(bus_id)
        except ValueError as err:
            raise SmiXmlError(f"nvidia-smi XML: {err}") from None
        facts[key] = _gpu_facts(gpu)
    return facts


def _gpu_facts(gpu: ET.Element) -> GpuFacts:
    total_mib = _quantity(gpu, "fb_memory_usage/total", "MiB")
    used_mib = _quantity(gpu, "fb_memory_usage/used", "MiB")
    power = _power_section(gpu)
    return GpuFacts(
        name=_text(gpu, "product_name"),
        pci_device_id=_hex(gpu, "pci/pci_device_id"),
        memory_total_bytes=None if total_mib is None else int(total_mib) * MIB,
        memory_used_bytes=None if used_mib is None else int(used_mib) * MIB,
        temperature_c=_quantity(gpu, "temperature/gpu_temp", "C"),
        power_w=_first(power, _POWER_DRAW, "W"),
        power_limit_w=_first(power, _POWER_LIMIT, "W"),
        sm_clock_mhz=_quantity(gpu, "clocks/sm_clock", "MHz"),
        mem_clock_mhz=_quantity(gpu, "clocks/mem_clock", "MHz"),
        gpu_util_pct=_quantity(gpu, "utilization/gpu_util", "%"),
        mem_util_pct=_quantity(gpu, "utilization/memory_util", "%"),
        ecc_enabled=_switch(gpu, "ecc_mode/current_ecc"),
        mig_enabled=_switch(gpu, "mig_mode/current_mig"),
    )


def _power_section(gpu: ET.Element) -> ET.Element | None:
    for name in _POWER_SECTIONS:
        section = gpu.find(name)
        if section is not None:
            return section
    return None


def _first(section: ET.Element | None, names: tuple[str, ...], unit: str) -> float | None:
    if section is None:
        return None
    for name in names:
        value = _quantity(section, name, unit)
        if value is not None:
            return value
    return None


def _text(parent: ET.Element, path: str) -> str | None:
    """An element's text; None where it is absent or one of nvidia-smi's no-value words."""
    element = parent.find(path)
    if element is None or element.text is None:
        return None
    text = element.text.strip()
    return None if not text or text.strip("[]") in _NO_VALUE else text


def _not_a_number(text: str) -> bool:
    # Besides _NO_VALUE, drivers add phrases of their own ("Requested functionality has been
    # deprecated"); none of them starts with a digit or a sign.
    return not (text[0].isdigit() or (text[0] == "-" and text[1:2].isdigit()))


def _quantity(parent: ET.Element, path: str, unit: str) -> float | None:
    text = _text(parent, path)
    if text is None or _not_a_number(text):
        return None
    match = _QUANTITY.match(text)
    if match is None or match.group(2) != unit:
        raise SmiXmlError(f"nvidia-smi XML: <{path}> is {text!r}, expected a number in {unit}")
    return float(match.group(1))


def _hex(parent: ET.Element, path: str) -> int | None:
    text = _text(parent, path)
    if text is None:
        return None
    try:
        return int(text, 16)
    except ValueError:
        raise SmiXmlError(f"nvidia-smi XML: <{path}> is {text!r}, expected hexadecimal") from None


def _switch(parent: ET.Element, path: str) -> bool | None:
    return {"Enabled": True, "Disabled": False}.get(_text(parent, path) or "")
