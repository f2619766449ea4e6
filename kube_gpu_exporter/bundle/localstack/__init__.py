"""A local monitoring stack for the demo and the end-to-end tests (see stack.py)."""
