"""Optional Kubernetes API enrichment: pod UIDs, owners and labels, and this node's GPU labels,
from one watch of this node's pods and one of this node object. Never a cluster-wide list."""
