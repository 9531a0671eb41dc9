"""`python -m specpilot` is the `specpilot` command."""

from specpilot.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
