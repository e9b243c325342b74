"""benchmarks/bench_neo4j_import.py reads the import tool's own phase times, counts and memory
(its first estimate for the whole import, and its peak) from its output; the expected values
below are read off the output by hand (runs of sessions 35 and 37)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench_neo4j_import import duration, parse_log  # noqa: E402

# the closing part of `neo4j-admin database import full` (Neo4j 5.26.30) on 5M realistic statements
OUTPUT = """\
  Estimated required memory usage: 1.025GiB
(1/4) Node import 2026-11-28 20:29:06.185+0000
  Estimated number of nodes: 2.17 M
  Estimated required memory usage: 1.025GiB
Node import COMPLETED in 5s 725ms
(2/4) Relationship import 2026-11-28 20:29:11.914+0000
  Estimated number of relationships: 1.75 M
  Estimated required memory usage: 1020MiB
Relationship import COMPLETED in 5s 646ms
(3/4) Relationship linking 2026-11-28 20:29:17.561+0000
Relationship linking COMPLETED in 1s 188ms
(4/4) Post processing 2026-11-28 20:29:18.749+0000
Post processing COMPLETED in 929ms
IMPORT DONE in 14s 243ms.\x20
Imported:
  2060403 nodes
  1710231 relationships
  16399310 properties
Peak memory usage: 1.052GiB
"""


def test_the_tools_phase_times_and_counts_are_read() -> None:
    assert parse_log(OUTPUT) == {
        "tool_s": 14.243, "node_import_s": 5.725, "relationship_import_s": 5.646,
        "relationship_linking_s": 1.188, "post_processing_s": 0.929,
        "nodes": 2060403, "relationships": 1710231, "properties": 16399310,
        "estimated_memory_gib": 1.025, "peak_memory_gib": 1.052}


@pytest.mark.parametrize(("text", "seconds"), [("929ms", 0.929), ("1m 3s 20ms", 63.02),
                                                ("2h 0m 1s", 7201.0), ("45s", 45.0)])
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


def test_a_line_that_is_no_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        duration("soon")
