"""The ``dlcp`` command: ``dlcp <area> <verb>``."""
