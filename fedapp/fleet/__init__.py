"""`fedapp fleet`: an emulated edge fleet on one Linux machine (root): one network namespace
per node joined to the SuperLink's namespace by a veth link rate-limited with tc HTB on both
ends, one cgroup v1 per node (cpu quota, memory limit, cpuacct usage), and a power model that
turns each node's measured CPU seconds into *modelled* joules (docs/fleet.md)."""


class FleetError(Exception):
    """A bad profile value, a missing capability, or a failed step of bringing the fleet up."""
