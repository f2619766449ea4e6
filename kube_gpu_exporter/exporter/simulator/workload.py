"""Deterministic, plausible GPU activity over time.

Utilization is a slow wave plus smooth noise, both pure functions of (seed, entity, time), so a test
can ask for the value at any instant and get the same answer twice. Power, temperature and clocks
are derived from utilization, which keeps them moving together the way real boards do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    base: float
    amplitude: float
    period_s: float
    noise: float
    # Share of the framebuffer a job of this kind keeps allocated.
    memory_fraction: float
    # Video engines: only inference-style work decodes streams.
    decoder: float = 0.0


SHAPES: dict[str, WorkloadShape] = {
    "training": WorkloadShape(0.86, 0.08, 600.0, 0.04, 0.78),
    "inference": WorkloadShape(0.45, 0.30, 300.0, 0.10, 0.42, decoder=0.15),
    "batch": WorkloadShape(0.50, 0.48, 1800.0, 0.05, 0.60),
    "idle": WorkloadShape(0.0, 0.0, 1.0, 0.0, 0.0),
}


def _hash01(seed: int, key: int, step: int) -> float:
    """A cheap integer hash mapped to [-1, 1]."""
    x = (seed * 0x9E3779B1 ^ key * 0x85EBCA6B ^ step * 0xC2B2AE35) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x / 0x7FFFFFFF - 1.0


def smooth_noise(seed: int, key: int, t: float) -> float:
    step = math.floor(t)
    frac = t - step
    a, b = _hash01(seed, key, step), _hash01(seed, key, step + 1)
    return a + (b - a) * frac


def utilization(shape: WorkloadShape, seed: int, key: int, t: float) -> float:
    """Fraction 0..1 of time the engine was busy at time t (seconds)."""
    if shape.base == 0.0 and shape.amplitude == 0.0:
        return 0.0
    phase = (key % 17) / 17 * 2 * math.pi
    wave = math.sin(2 * math.pi * t / shape.period_s + phase)
    value = shape.base + shape.amplitude * wave + shape.noise * smooth_noise(seed, key, t)
    return min(1.0, max(0.0, value))
