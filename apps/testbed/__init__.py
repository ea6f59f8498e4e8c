"""Training jobs on the testbed's fabrics: the demo's and bench's scenarios, faults, and where time went."""
