"""Working from a laptop: a command given `--cluster NAME` runs on that cluster's login host
over SSH (`clusters` names the clusters, `ssh` is the connection, `sync` sends the code,
`forward` hands a verb over; `cli/serve` receives it on the cluster side, above the CLI and
the API it runs, so no import runs from here back up to them)."""
