"""The job folder and what it says: where it lives and who may own it, and reading back
failures, heartbeats and the failure report from it.
"""
