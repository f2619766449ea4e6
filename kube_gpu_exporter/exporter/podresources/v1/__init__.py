"""Generated gRPC stubs for the kubelet pod-resources v1 API. Regenerate with `make protos`."""
