"""The benchmarks' paired C=1 jobs: two processes whose timed sessions alternate."""

from __future__ import annotations

import pytest

from benchmarks.peers.run import run_paired


def test_paired_jobs_alternate_their_sessions_and_report_each_own_figures() -> None:
    ours, partner = run_paired("plain", "sqlite:full", 3)
    assert ours["system"] == "plain" and partner["system"] == "sqlite:full"
    for result in (ours, partner):
        assert result["C"] == 1 and result["sessions"] == 3
        # steps/s counts the timed sessions' own time, not the other job's turns.
        assert result["steps_per_s"] == pytest.approx(3 * 50 / result["wall_s"])
        assert result["ms_per_step"] > 0
    # A durable write per step (fsync) against none: the pairing kept them apart.
    assert partner["ms_per_step"] > ours["ms_per_step"]


def test_a_paired_job_with_a_bad_system_starts_nothing() -> None:
    with pytest.raises(ValueError, match="system must be one of"):
        run_paired("plain", "nosuch", 3)
    with pytest.raises(ValueError, match="sessions must be >= 1"):
        run_paired("plain", "sqlite:full", 0)
