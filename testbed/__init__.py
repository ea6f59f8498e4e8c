"""Emulated cluster in network namespaces (``dlcp.testbed``)."""
