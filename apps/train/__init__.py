"""Training with DLCP or gloo on a synthetic task (``dlcp train``), in local processes or one rank per host."""
