"""python -m gpucmp: the command line (gpucmp.harness.cli): compare, specs, devices, bench,
calibrate, cnn."""
import sys

from gpucmp.harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
