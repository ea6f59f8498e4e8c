"""P4Runtime controller (``dlcp.controller``) that configures switches for PS or collective traffic."""
