"""`python -m slurmtorch.bootstrap`: see the package docstring."""

import sys

from slurmtorch.bootstrap.runner import main

if __name__ == "__main__":
    sys.exit(main())
