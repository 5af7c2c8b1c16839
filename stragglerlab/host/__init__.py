"""Host plumbing below the injectors: cgroup CPU isolation, network namespaces, residue cleanup.

Everything here changes the machine (cgroups, namespaces, tc, stray processes)
and knows how to undo it; nothing here knows about training or faults.
"""
