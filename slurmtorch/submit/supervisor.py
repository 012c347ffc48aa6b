"""The restart supervisor's entry name: every rendered `--max-restarts` script runs
`python -m slurmtorch.submit.supervisor`, so a job queued before an upgrade still finds it
after. The supervisor itself is `submit/batchnode/supervisor.py`, with the rest of the
batch node's code. As it ends it leaves its exit code in the job folder, whose absence tells
the batch script it was killed outright (jobdir.supervisor_ended).
"""

import sys

from slurmtorch.submit.batchnode.supervisor import main
from slurmtorch.submit.jobfolder import jobdir

if __name__ == "__main__":
    sys.exit(jobdir.supervisor_ended(main()))
