"""A connection lost while a command ran on the cluster: one line naming what goes on there, and
the command that follows it again (pure). The real loss is on the testbed's login host:
tests/remote/test_remote_testbed.py::test_a_connection_lost_while_waiting_says_the_job_goes_on_and_how_to_follow_it_again."""

from slurmtorch.remote import ssh
from slurmtorch.remote.clusters import Cluster


def cluster() -> Cluster:
    return Cluster(name="alps", host="ela", site="cscs-alps", python="python3", modules=(), workdir=None,
                   source="clusters.yaml")


def test_a_submission_that_lost_its_connection_names_its_job_and_how_to_follow_it():
    error = ssh.lost(cluster(), b"4242\n")
    assert error.exit_code == 255
    assert error.render() == ("error: lost the connection to cluster alps; job 4242 goes on there\n"
                              "tip: slurmtorch logs 4242 --follow --cluster alps follows it again")


def test_without_a_job_id_the_tip_lists_the_jobs():
    error = ssh.lost(cluster(), b"version v1")
    assert "what the command started goes on there" in error.render()
    assert "slurmtorch status --cluster alps shows your jobs" in error.render()
