"""The site model: site files and their search path, safe YAML, the schema, value checks,
the rules between keys, the frozen model and each fabric's environment.

`load_site` and friends are this package's face (`from slurmtorch.submit import sites`).
"""

from slurmtorch.submit.sites.load import available_sites, find_site, load_site, search_path, site_as_dict, site_ref

__all__ = ['available_sites', 'find_site', 'load_site', 'search_path', 'site_as_dict', 'site_ref']
