"""The kubelet pod-resources API: which container holds which device, and what the node can
allocate. Data flows one way: gRPC responses -> allocations -> holders, which the attribution
join (kube_gpu_exporter/exporter/attribution/) turns into labels."""
