"""The kubelet pod-resources API: which container holds which device, and what the node can
allocate. Data flows one way: gRPC responses -> allocations -> labels."""
