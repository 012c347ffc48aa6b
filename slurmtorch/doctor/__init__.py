"""`slurmtorch doctor`: preflight checks of a node against its site, and the in-allocation
check (`python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor`).

Facts are gathered at the edge (`facts`), checks are pure functions over them (`node`
on a node; `layout` and `bandwidth` across an allocation), each returning `report`
lines: ok, warn or fail with the fix. `sitechoice` picks the site and node type,
`allocation` is one rank of the in-allocation check. The names below are what the verb
(cli/doctor.py) uses.
"""

from slurmtorch.doctor.facts import gather_node_facts
from slurmtorch.doctor.node import node_checks, wanted_backend
from slurmtorch.doctor.checks import any_failed, summary
from slurmtorch.doctor.sitechoice import RECORDED, resolve_node_type, site_for_doctor

__all__ = ["RECORDED", "any_failed", "gather_node_facts", "node_checks", "resolve_node_type", "site_for_doctor",
           "summary", "wanted_backend"]
