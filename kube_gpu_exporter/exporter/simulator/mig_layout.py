"""Places MIG profiles on a GPU's eight memory slices the way the driver allows, and assigns the
GPU-instance ids the driver would.

GI ids follow the placement, not creation order: the full GPU is 0, the two halves 1-2, the four
quarters 3-6 and the eight single slices 7-14 (so seven 1g instances get ids 7-13, as observed on
H100).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kube_gpu_exporter.exporter.simulator.gpu_models import GpuModel, MigProfile

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


class MigLayoutError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class PlacedInstance:
    profile: MigProfile
    start: int

    @property
    def gpu_instance_id(self) -> int:
        size = self.profile.placement_size
        return (MEMORY_SLICES // size - 1) + self.start // size


def place(model: GpuModel, profile_names: list[str]) -> tuple[PlacedInstance, ...]:
    """Return one placement per requested profile, in request order, or raise MigLayoutError."""
    profiles = []
    for position, name in enumerate(profile_names):
        profile = model.profile(name)
        if profile is None:
            valid = ", ".join(p.name for p in model.mig_profiles) or "none (no MIG support)"
            raise MigLayoutError(
                f"[{position}]: unknown MIG profile {name!r} for {model.name} (valid: {valid})"
            )
        profiles.append(profile)
    counts = Counter(p.name for p in profiles)
    for profile in profiles:
        if counts[profile.name] > profile.max_count:
            raise MigLayoutError(
                f"at most {profile.max_count} x {profile.name} fit on {model.name}, "
                f"{counts[profile.name]} requested"
            )
    compute = sum(p.compute_slices for p in profiles)
    if compute > COMPUTE_SLICES:
        raise MigLayoutError(
            f"the profiles need {compute} compute slices; {model.name} has {COMPUTE_SLICES}"
        )
    starts = _search(profiles, 0, [False] * MEMORY_SLICES, [])
    if starts is None:
        raise MigLayoutError(
            f"profiles {profile_names} have no valid placement on {model.name}'s memory slices"
        )
    return tuple(PlacedInstance(p, s) for p, s in zip(profiles, starts, strict=True))


def _search(
    profiles: list[MigProfile], i: int, used: list[bool], chosen: list[int]
) -> list[int] | None:
    # Largest-first would be faster, but at most seven instances make plain backtracking cheap.
    if i == len(profiles):
        return list(chosen)
    profile = profiles[i]
    for start in profile.placement_starts:
        span = range(start, start + profile.placement_size)
        if any(used[s] for s in span):
            continue
        for s in span:
            used[s] = True
        chosen.append(start)
        found = _search(profiles, i + 1, used, chosen)
        if found is not None:
            return found
        chosen.pop()
        for s in span:
            used[s] = False
    return None
