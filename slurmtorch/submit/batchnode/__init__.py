"""What runs on a job's batch node: the restart supervisor, whom a failed start blames and
what next, the batch node's watcher, and the bash of ours the batch script prints.
"""
