"""The server reports which kernel serves every op: in /get_server_info and its startup log."""

from __future__ import annotations

import httpx

from sglang.ci.servers import RunningServer
from sglang.ops.binding import REFERENCE_OPS


def test_server_info_carries_the_op_table(http: httpx.Client) -> None:
    info = http.get("/get_server_info").json()
    table = info["op_table"]
    assert table["platform"] == info["device"]
    rows = {row["op"]: row for row in table["ops"]}
    assert set(rows) == set(REFERENCE_OPS)
    for row in rows.values():
        assert row["candidate"].partition(":")[2], row
        # Every candidate that lost says why.
        assert all(r["reason"] for r in row["rejected"]), row
        # The reference is always a candidate: chosen, or the last of those that lost.
        families = [row["family"], *(r["family"] for r in row["rejected"])]
        assert "reference" in (families[0], families[-1]), row
    assert rows["attention_backend"]["family"] != "reference", "the platform's attention kernel was not bound"


def test_startup_log_names_the_chosen_kernels(server: RunningServer) -> None:
    if server.process is None:
        return  # an external server ($SGLANG_E2E_PORT): its log is not ours to read
    log = server.log_path.read_text()
    line = next((line for line in log.splitlines() if " ops: " in line and "attention_backend=" in line), None)
    assert line is not None, "no op-table line in the startup log"
    assert all(f"{op}=" in line for op in REFERENCE_OPS)
