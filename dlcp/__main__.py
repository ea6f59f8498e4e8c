"""``python -m dlcp``: the same command line as the ``dlcp`` script."""

from dlcp.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
