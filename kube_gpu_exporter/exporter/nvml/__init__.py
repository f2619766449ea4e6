"""Everything that talks to NVML. Every call goes through the NvmlSource the poller is handed
(source.py): the `pynvml` module on a GPU host, the simulator's object under --simulate."""
