"""``examples/notebook.ipynb`` executed in a real ipykernel (nbclient), its outputs checked."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"


class CountingClient(NotebookClient):
    """Counts the kernel's IOPub message types per cell (nbclient folds
    ``update_display_data`` into the output it updates)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.messages: dict[int, Counter[str]] = {}

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        self.messages.setdefault(cell_index, Counter())[msg["msg_type"]] += 1
        return super().process_message(msg, cell, cell_index)


def _code_cells(nb: Any) -> list[tuple[int, Any]]:
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _text(cell: Any) -> str:
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/plain", ""))
    return "".join(parts)


def _html(cell: Any) -> str:
    return "".join(o.data.get("text/html", "") for o in cell.outputs if "data" in o)


def test_the_notebook_runs_and_shows_the_sessions(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_before = dict(os.environ)
    os.environ["DEX_NOTEBOOK_STORE"] = str(tmp_path / "engine.db")
    os.environ.pop("RAY_ADDRESS", None)
    try:
        client = CountingClient(
            nb,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": str(ROOT / "examples")}},
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    cells = _code_cells(nb)
    for _, cell in cells:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source

    _, setup, first_turn, view, refund, approve, sync, evaluation, plot, pydantic, pyd_eval, _ = (
        cells
    )
    assert f"engine on {tmp_path / 'engine.db'}" in _text(setup[1])

    # The live view: one display output, updated in place as events arrived.
    index, cell = first_turn
    assert client.messages[index]["display_data"] == 1
    assert client.messages[index]["update_display_data"] >= 3
    assert "Order status" in _html(cell) and "office chair" in _html(cell)
    assert "turn_completed" in _html(cell)

    # Rich display, with a plain-text fallback.
    index, cell = view
    html, plain = _html(cell), _text(cell)
    assert "<table>" in html and "Where is order A2?" in html
    assert "session nb-1: waiting_for_user_message" in plain and "lookup_order" in plain

    # The refund waits for approval; approving from the notebook finishes the turn.
    assert "('call-refund', 'refund_order'" in _text(refund[1])
    assert "Waiting for a person" in _html(refund[1])
    assert "Refund: refunded 300 cents on A1" in _text(approve[1])
    assert _text(sync[1]).startswith("2 turns;")

    # A batch evaluation: its progress bar, the table, the figure.
    index, cell = evaluation
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cell.outputs
    ), "no progress bar"
    table = _text(cell)
    for case_id, score in [("where-a2", "1.0"), ("refund-a1", "1.0"), ("wrong", "0.0")]:
        row = next(line for line in table.splitlines() if line.startswith(case_id))
        assert row.split()[1:3] == ["scored", score], row
    assert any("image/png" in o.get("data", {}) for o in plot[1].outputs)

    # The same desk as an unchanged Pydantic AI agent: a live turn, then the evaluation.
    index, cell = pydantic
    assert client.messages[index]["update_display_data"] >= 1
    assert "Order status" in _html(cell) and "office chair" in _html(cell)
    table = _text(pyd_eval[1])
    for case_id, score in [("where-a2", "1.0"), ("refund-a1", "1.0"), ("wrong", "0.0")]:
        row = next(line for line in table.splitlines() if line.startswith(case_id))
        assert row.split()[1:3] == ["scored", score], row
