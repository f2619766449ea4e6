"""The `err_msg` texts: dcgm-exporter's table (4.7.1 onwards), pinned code by code where users are
most likely to key alerts on them, plus its size and its fallback."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from kube_gpu_exporter.exporter.dcgm_compat import PROFILES
from kube_gpu_exporter.exporter.xid_messages import UNKNOWN_XID_MESSAGE, XID_MESSAGES, xid_message
from tests.conftest import LABELS, render


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "No Error"),
        (5, "Unused"),
        (13, "Graphics Engine Exception"),
        (31, "GPU memory page fault"),
        (
            45,
            "Preemptive cleanup, due to previous errors -- Most likely to see when running "
            "multiple cuda",
        ),
        (48, "Double Bit ECC Error"),
        (63, "ECC page retirement or row remapping recording event"),
        (64, "ECC page retirement or row remapper recording failure"),
        (70, "CE3: Unknown Error"),
        (74, "NVLINK Error"),
        (79, "GPU has fallen off the bus"),
        (87, "Reserved"),
        (92, "High single-bit ECC error rate"),
        (94, "Contained ECC error"),
        (95, "Uncontained ECC error"),
        (109, "Context Switch Timeout Error"),
        (119, "GSP RPC Timeout"),
        (142, "Robust Channel NVENVC3 Error"),
        (144, "NVLINK: Saw Error"),
        (154, "GPU Recovery Action Changed"),
        (168, "Reduced GPU Memory Capacity (Errors found in write protection region)"),
        (172, "Uncorrectable SRAM Error"),
    ],
)
def test_upstream_texts(code, text):
    assert xid_message(code) == text


def test_every_code_from_0_to_172_has_a_text_and_nothing_else_does():
    assert sorted(XID_MESSAGES) == list(range(173))
    assert all(text and text == text.strip() for text in XID_MESSAGES.values())


@pytest.mark.parametrize("code", [173, 999, -1, 2**31])
def test_codes_outside_the_table_are_unknown(code):
    assert xid_message(code) == UNKNOWN_XID_MESSAGE == "Unknown Error"


@pytest.mark.parametrize("version", list(PROFILES))
def test_every_profile_labels_xid_series_from_this_table(sim, make_poller, version):
    """No profile has a table of its own: texts did not change after 4.7.1."""
    labels = replace(LABELS, dcgm=PROFILES[version])
    text = render(make_poller(sim).sweep(), labels)
    messages = re.findall(r'err_code="(\d+)",err_msg="([^"]*)"', text)
    assert messages
    assert all(msg == xid_message(int(code)) for code, msg in messages)
    assert ("0", "No Error") in messages
