"""Applications on top of the stack (``dlcp.apps``): training, benchmarks, and the testbed's scenarios."""
