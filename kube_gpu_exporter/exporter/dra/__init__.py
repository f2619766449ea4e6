"""Dynamic Resource Allocation of NVIDIA GPUs: the driver's device names, this node's
ResourceSlices, which NVML device a DRA device is, and what DRA adds to capacity. Both the
kubelet's answers (podresources/) and the API's slices (kubernetes/) read through here."""
