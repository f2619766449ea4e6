"""Short English descriptions of NVIDIA XID error codes, for the `err_msg` label.

dcgm-exporter labels DCGM_FI_DEV_XID_ERRORS with `err_msg`, taken from a fixed table indexed by
XID code (codes 0..172); any code outside that table is reported as "Unknown Error", and code 0
means no XID has been seen. This module is our equivalent table, so the metric carries a readable
label without a DCGM dependency. NVML reports 999 when the driver's XID is unknown; it is not in
the table and therefore also maps to "Unknown Error".

Where the facts come from: NVIDIA's "XID Errors" documentation in the GPU deployment and
management guides (https://docs.nvidia.com/deploy/xid-errors/), i.e. the Xid Catalog for Ampere
and newer GPUs (codes, driver mnemonics, descriptions and trigger conditions) and the archived
table for Volta and older GPUs. The code-to-meaning mapping follows those sources; every
description below is our own wording. A code that NVIDIA lists only as "Unused" or "Reserved" in
both sources has no entry here and falls back to UNKNOWN_XID_MESSAGE. When the two sources
disagree, the newer catalog wins, except that codes the catalog marks "Unused" on current GPUs
keep their meaning from the older table (they can still be seen on older boards).
"""

from __future__ import annotations

import types
from collections.abc import Mapping

UNKNOWN_XID_MESSAGE = "Unknown Error"

XID_MESSAGES: Mapping[int, str] = types.MappingProxyType(
    {
        0: "No error",
        1: "Bad or corrupted push buffer stream",
        2: "Bad or corrupted push buffer stream",
        3: "Bad or corrupted push buffer stream",
        4: "Bad or corrupted push buffer stream, or semaphore timeout",
        6: "Bad or corrupted push buffer stream",
        7: "Bad or corrupted push buffer address",
        8: "GPU stopped making progress (idle timeout)",
        9: "Driver failed while programming the GPU",
        11: "Bad or corrupted push buffer stream",
        12: "Driver failed while handling a GPU exception",
        13: "Exception raised by the graphics engine",
        14: "Injected (fake) error from user space",
        16: "Display engine stopped responding",
        18: "PCI bus mastering is off in config space",
        19: "Display engine error (missed notifier)",
        20: "Bad or corrupted MPEG push buffer",
        21: "Bad or corrupted motion estimation push buffer",
        22: "Bad or corrupted video processor push buffer",
        24: "GPU semaphore timed out",
        25: "Illegal push buffer stream contents",
        26: "Frame buffer timed out",
        27: "Video engine exception (VP)",
        28: "Video engine exception (VP2)",
        29: "Video engine exception (BSP)",
        30: "Bad address in GPU semaphore access",
        31: "GPU memory page fault (MMU fault)",
        32: "Bad or corrupted push buffer stream (PBDMA)",
        33: "Internal microcontroller error",
        34: "Video engine exception (MSVLD)",
        35: "Video engine exception (MSPDEC)",
        36: "Video engine exception (MSPPP)",
        37: "Driver firmware error (unimplemented method)",
        38: "Driver firmware error (watchdog timeout)",
        39: "Copy engine 0 exception",
        40: "Copy engine 1 exception",
        41: "Copy engine 2 exception",
        42: "Video engine exception (VIC)",
        43: "GPU stopped processing after an application fault",
        44: "Graphics engine fault while switching context",
        45: "Preemptive channel cleanup after earlier errors",
        46: "GPU stopped processing (GPU timeout)",
        47: "Video engine exception (NVENC0)",
        48: "Double-bit (uncorrectable) ECC error",
        54: "GPU board is missing its auxiliary power connection",
        56: "Display channel exception",
        57: "Failed to program the video memory interface",
        58: "Video memory interface found unstable",
        59: "Internal microcontroller (PMU) error",
        60: "Video engine exception (SEC2)",
        61: "Internal microcontroller breakpoint or warning",
        62: "Internal microcontroller halted",
        63: "ECC page retirement or row remap recorded",
        64: "ECC page retirement or row remap could not be recorded",
        65: "Video engine exception (NVENC1)",
        66: "Illegal register access by the driver",
        67: "Illegal access by the driver (verification violation)",
        68: "NVDEC0 video decoder exception",
        69: "Class error in the graphics engine",
        70: "Copy engine 3 error",
        71: "Copy engine 4 error",
        72: "Copy engine 5 error",
        73: "NVENC2 video encoder error",
        74: "Error on an NVLink connection",
        75: "Copy engine 6 error",
        76: "Copy engine 7 error",
        77: "Copy engine 8 error",
        78: "vGPU failed to start",
        79: "GPU fell off the bus (unreachable over PCIe)",
        80: "Data sent to the GPU was corrupted (CRC mismatch)",
        81: "Error in the VGA subsystem",
        82: "NVJPG0 JPEG engine error",
        83: "NVDEC1 video decoder error",
        84: "NVDEC2 video decoder error",
        85: "Copy engine 9 error",
        86: "Optical flow accelerator (OFA) exception",
        88: "NVDEC3 video decoder error",
        89: "NVDEC4 video decoder error",
        92: "Excessive rate of single-bit ECC errors",
        93: "Provisioned InfoROM wear limit exceeded (non-fatal)",
        94: "Contained ECC error (one application affected)",
        95: "Uncontained ECC error (GPU reset required)",
        96: "NVDEC5 video decoder error",
        97: "NVDEC6 video decoder error",
        98: "NVDEC7 video decoder error",
        99: "NVJPG1 JPEG engine error",
        100: "NVJPG2 JPEG engine error",
        101: "NVJPG3 JPEG engine error",
        102: "NVJPG4 JPEG engine error",
        103: "NVJPG5 JPEG engine error",
        104: "NVJPG6 JPEG engine error",
        105: "NVJPG7 JPEG engine error",
        106: "SMBPBI test message",
        107: "SMBPBI test message (silent)",
        109: "Context switch timed out",
        110: "Security fault",
        111: "Display bundle error",
        112: "Error in the display supervisor",
        113: "DisplayPort link training failed",
        114: "Display pipeline underflow",
        115: "Error on the display core channel",
        116: "Error on a display window channel",
        117: "Error on the display cursor channel",
        118: "Error in the display pixel pipeline",
        119: "Timed out waiting for a GSP RPC reply",
        120: "Error in GSP firmware",
        121: "C2C link error (GPU to CPU chip-to-chip link)",
        122: "SPI flash read via PMU RPC failed",
        123: "SPI flash write via PMU RPC failed",
        124: "SPI flash erase via PMU RPC failed",
        125: "InfoROM file system failure",
        126: "Copy engine 10 error",
        127: "Copy engine 11 error",
        128: "Copy engine 12 error",
        129: "Copy engine 13 error",
        130: "Copy engine 14 error",
        131: "Copy engine 15 error",
        132: "Copy engine 16 error",
        133: "Copy engine 17 error",
        134: "Copy engine 18 error",
        135: "Copy engine 19 error",
        136: "NVLink ALI link training failed",
        137: "NVLink privilege error (illegal peer access)",
        138: "Deep learning accelerator (DLA) error",
        139: "OFA1 optical flow accelerator error",
        140: "Unrecovered ECC error in GPU memory",
        141: "CUDA fast path error",
        142: "NVENC3 video encoder error",
        143: "GPU initialization failed",
        144: "NVLink SAW error",
        145: "NVLink RLW error",
        146: "NVLink TLW error",
        147: "NVLink TREX error",
        148: "NVLink NVLPW_CTRL error",
        149: "NVLink NETIR error",
        150: "NVLink MSE error",
        151: "Channel encryption key rotation error",
        152: "DLA SMMU error",
        153: "DLA timed out",
        154: "Required GPU recovery action changed",
        155: "NVLink software-defined error (deliberate link down)",
        156: "GPU resource retired",
        157: "Resource retirement failed",
        158: "Fatal GPU timeout",
        159: "CHI non-data error",
        160: "GPU channel retired",
        161: "Channel retirement failed",
        162: "Power smoothing circuitry re-engaged",
        163: "Power smoothing circuitry disengaged",
        164: "Power smoothing circuitry nearing end of life",
        165: "Power smoothing circuitry lifetime used up",
        166: "NVLink encrypted traffic before link was set up",
        167: "Fatal PCIe timeout",
        168: "Memory capacity reduced (errors in write-protected region)",
        169: "Internal microcontroller (SEC2) halted",
        170: "NVLink interrupt in confidential computing mode",
        171: "Uncorrectable DRAM error (detail for XID 48)",
        172: "Uncorrectable SRAM error (detail for XID 48)",
    }
)

# XIDs that NVIDIA's k8s-device-plugin treats as application errors rather than device health
# failures: the faulting workload is to blame and the GPU stays healthy, so these must not mark a
# device unhealthy (13 engine exception, 31 page fault, 43 stopped processing, 45 preemptive
# cleanup, 68 NVDEC0 exception, 109 context switch timeout).
APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})


def xid_message(code: int) -> str:
    """Return the short description of XID `code`, or UNKNOWN_XID_MESSAGE if it has none."""
    return XID_MESSAGES.get(code, UNKNOWN_XID_MESSAGE)
