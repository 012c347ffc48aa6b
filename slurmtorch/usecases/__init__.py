"""What a user can do with a job, once for every front end: the CLI's verbs, the Distributor
and the cluster side of `--cluster` call these and reach nothing past them. A dry run is a
value (`RenderedJob`); submitting, running and following take it.
"""
