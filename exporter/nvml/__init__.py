"""Everything that talks to NVML. All calls go through the `pynvml` module attribute, so the
simulator can stand in for the driver by patching that module."""
