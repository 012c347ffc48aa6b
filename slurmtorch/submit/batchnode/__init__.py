"""What runs on a restartable job's batch node beside `submit.supervisor`: whom a failed
start blames and what next, and the bash of ours the batch script prints.
"""
