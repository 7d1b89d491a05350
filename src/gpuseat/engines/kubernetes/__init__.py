"""The Kubernetes engine: per seat holder a namespace with a one-GPU quota, their RoleBinding and a
probe Pod, applied with kubectl through the Runner (server-side dry run when a cluster is configured)."""
