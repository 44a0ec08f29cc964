"""``python -m warpgauge ...``: the same command line as the ``warpgauge`` console script."""

from warpgauge.cli import main

if __name__ == "__main__":
    main()
