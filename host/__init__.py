"""DLCP host stack (``dlcp.host``): UDP transport, parameter server and ring all-reduce."""
