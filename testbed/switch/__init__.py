"""DLCP's software switch: a C data plane running the P4 pipeline of ``p4src/``, and a P4Runtime server."""
