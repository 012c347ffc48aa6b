"""`python -m slurmtorch.doctor`: the in-allocation check, run in every rank of a job."""

import sys

from slurmtorch.doctor.allocation_check import allocation_main

if __name__ == "__main__":
    sys.exit(allocation_main(sys.argv[1:]))
