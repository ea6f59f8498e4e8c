"""Large-scale packet simulations (``dlcp.simulations``)."""
