"""P4 tooling: constant generation, builds, P4Info reading and the switch test vectors.

Nothing here runs at import time; the compilers and BMv2 are found through
:mod:`dlcp.p4.tools` (the one place that reads ``DLCP_P4_BIN_DIR``).
"""
